select id, job_id, connection, queue, envelope, attempts, exception, message, traceback, reason, failed_at
from pgqueue.failed_jobs
where id = %s::uuid
