-- pgqueue.job_stats per minute, queue and job name (the shards summed), oldest first, filtered
-- by queue, job name and time range (null: any). Reads the primary key's minute range.
select s.minute, s.queue, s.name,
       sum(s.succeeded)::bigint, sum(s.failed)::bigint, sum(s.retried)::bigint, sum(s.cancelled)::bigint,
       sum(s.duration_count)::bigint, sum(s.duration_sum), max(s.duration_max),
       sum(s.latency_count)::bigint, sum(s.latency_sum), max(s.latency_max), sum(s.given_back)::bigint
from pgqueue.job_stats s
where s.minute >= coalesce(%(since)s::timestamptz, '-infinity')
  and s.minute < coalesce(%(until)s::timestamptz, 'infinity')
  and (%(queue)s::text is null or s.queue = %(queue)s::text)
  and (%(name)s::text is null or s.name = %(name)s::text)
group by s.minute, s.queue, s.name
order by s.minute, s.queue, s.name
limit %(limit)s
