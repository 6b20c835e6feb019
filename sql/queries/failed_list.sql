-- Failures, newest first, optionally of one queue and before a moment (for paging).
select id, job_id, connection, queue, envelope, attempts, exception, message, traceback, reason, failed_at
from pgqueue.failed_jobs
where (%(queue)s::text is null or queue = %(queue)s::text)
  and (%(before)s::timestamptz is null or failed_at < %(before)s::timestamptz)
order by failed_at desc, id
limit %(limit)s
