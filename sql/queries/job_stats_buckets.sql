-- Outcomes of the last %(span)s minutes (the current, partial minute included; database clock)
-- in buckets of %(bucket)s minutes, oldest first, every bucket present (zero when nothing
-- finished), all queues summed or one queue (null: all). Aggregated here, not in Python: the
-- read is one range of job_stats' primary key (minute leads it), bounded by the span. The
-- columns are the fields of pgqueue.store.ThroughputBucket.
with counted as (
    select floor(extract(epoch from s.minute - (date_trunc('minute', now()) + interval '1 minute'
                                                 - make_interval(mins => %(span)s::integer)))
                 / (60 * %(bucket)s::integer))::integer as i,
           sum(s.succeeded) as succeeded, sum(s.failed) as failed, sum(s.retried) as retried,
           sum(s.cancelled) as cancelled
    from pgqueue.job_stats s
    where s.minute >= date_trunc('minute', now()) + interval '1 minute' - make_interval(mins => %(span)s::integer)
      and s.minute < date_trunc('minute', now()) + interval '1 minute'
      and (%(queue)s::text is null or s.queue = %(queue)s::text)
    group by 1
)
select date_trunc('minute', now()) + interval '1 minute'
         - make_interval(mins => %(span)s::integer) + make_interval(mins => g.i * %(bucket)s::integer) as start,
       %(bucket)s::integer as minutes,
       coalesce(c.succeeded, 0)::bigint as succeeded, coalesce(c.failed, 0)::bigint as failed,
       coalesce(c.retried, 0)::bigint as retried,
       coalesce(c.cancelled, 0)::bigint as cancelled
from generate_series(0, %(span)s::integer / %(bucket)s::integer - 1) as g(i)
left join counted c on c.i = g.i
order by g.i
