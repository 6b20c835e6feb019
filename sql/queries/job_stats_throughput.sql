-- Throughput per queue over the last N minutes for each N given (the current, partial minute
-- included): outcomes counted in pgqueue.job_stats, and the database clock. One index range
-- of job_stats (the longest window). The columns are the fields of pgqueue.store.Throughput.
select w.minutes, s.queue,
       coalesce(sum(s.succeeded), 0)::bigint as succeeded, coalesce(sum(s.failed), 0)::bigint as failed,
       coalesce(sum(s.retried), 0)::bigint as retried, coalesce(sum(s.cancelled), 0)::bigint as cancelled
from unnest(%(windows)s::integer[]) as w(minutes)
join pgqueue.job_stats s
  on s.minute > date_trunc('minute', now()) - make_interval(mins => w.minutes)
where s.minute > date_trunc('minute', now()) - make_interval(mins => (select max(m) from unnest(%(windows)s::integer[]) m))
group by w.minutes, s.queue
order by s.queue, w.minutes
