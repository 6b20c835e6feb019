-- issue 27: a workflow's checkpoints in seq order (results as JSON text, decoded by the caller).
select seq, name, kind, state, result::text as result, error, attempts, started_at, ended_at, wake_at, signal,
       child_id
from pgqueue.workflow_steps_of(%s::uuid)
