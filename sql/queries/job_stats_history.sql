-- pgqueue.job_stats per minute, queue and job name (the shards summed), oldest first, filtered
-- by queue, job name and time range (null: any). Reads the primary key's minute range. The
-- columns are the fields of pgqueue.store.JobStatsRow (read with class_row).
select s.minute, s.queue, s.name,
       sum(s.succeeded)::bigint as succeeded, sum(s.failed)::bigint as failed,
       sum(s.retried)::bigint as retried, sum(s.cancelled)::bigint as cancelled,
       sum(s.duration_count)::bigint as duration_count, sum(s.duration_sum)::double precision as duration_sum,
       max(s.duration_max)::double precision as duration_max,
       sum(s.latency_count)::bigint as latency_count, sum(s.latency_sum)::double precision as latency_sum,
       max(s.latency_max)::double precision as latency_max, sum(s.given_back)::bigint as given_back
from pgqueue.job_stats s
where s.minute >= coalesce(%(since)s::timestamptz, '-infinity')
  and s.minute < coalesce(%(until)s::timestamptz, 'infinity')
  and (%(queue)s::text is null or s.queue = %(queue)s::text)
  and (%(name)s::text is null or s.name = %(name)s::text)
group by s.minute, s.queue, s.name
order by s.minute, s.queue, s.name
limit %(limit)s
