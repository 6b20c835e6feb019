-- The failure records of one job id (a retried job keeps its id), newest first.
select id, failed_at, attempts, reason, exception, left(message, 300) as message
from pgqueue.failed_jobs
where job_id = %(job_id)s::uuid
order by failed_at desc, id desc
limit %(limit)s
