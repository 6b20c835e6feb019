-- issue 27: a workflow's child job, dispatched once and awaited: (outcome, child_id, result, error).
-- Arguments: job id, token, seq, name, the child's envelope (JSON text), its delay (seconds).
select outcome, child_id, result::text, error
from pgqueue.workflow_child(%s::uuid, %s::bigint, %s::integer, %s::text, %s::jsonb, %s::double precision)
