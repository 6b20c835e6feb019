-- issue 27: a workflow's sleep or signal wait: (outcome, payload). Arguments: job id, token, seq,
-- name, kind ('sleep' or 'signal'), the signal name (null for a sleep), seconds (null: no timeout).
select outcome, payload::text
from pgqueue.workflow_wait(%s::uuid, %s::bigint, %s::integer, %s::text, %s::text, %s::text, %s::double precision)
