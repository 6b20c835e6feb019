-- issue 26: one job's state, times, result, failure and failed attempts (pgqueue.job_state); no row
-- when pgqueue knows nothing of the id.
select state, queue, name, attempts, tries, created_at, available_at, reserved_at, finished_at, result,
       result_expires_at, failure_id, reason, message, errors, result_ttl, progress,
       parents, children, batch_id
from pgqueue.job_state(%s::uuid)
