-- The failure records of one job id (a retried job keeps its id), newest first. The job's name
-- and args come along so the page masks what the job declares secret in each message.
select id, failed_at, attempts, reason, exception, left(message, 300) as message,
       length(message) > 300 as message_cut, envelope->>'name' as name, envelope->'args' as args
from pgqueue.failed_jobs
where job_id = %(job_id)s::uuid
order by failed_at desc, id desc
limit %(limit)s
