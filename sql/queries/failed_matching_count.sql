-- How many failure records match the dashboard's filters of failed jobs (queue, job name, reason,
-- failed_at range), counted up to %(cap)s + 1, and how many of those may be retried (within their
-- deadline, job not live again): what a bulk retry or forget of "all matching" acts on.
select count(*)::bigint, count(*) filter (where x.retryable)::bigint
from (
    select (f.envelope->>'retry_until' is null
            or to_timestamp((f.envelope->>'retry_until')::double precision) >= clock_timestamp())
           and not exists (select 1 from pgqueue.jobs j where j.id = f.job_id) as retryable
    from pgqueue.failed_jobs f
    where (%(queue)s::text is null or f.queue = %(queue)s::text)
      and (%(name)s::text is null or f.envelope->>'name' = %(name)s::text)
      and (%(reason)s::text is null or f.reason = %(reason)s::text)
      and (%(since)s::timestamptz is null or f.failed_at >= %(since)s::timestamptz)
      and (%(until)s::timestamptz is null or f.failed_at < %(until)s::timestamptz)
    limit %(cap)s + 1
) x
