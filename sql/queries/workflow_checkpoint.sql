-- issue 27: a workflow step's result recorded, fenced by the token: 'recorded', 'not_yours' or 'conflict'.
-- Arguments: job id, token, seq, name, kind, the result (JSON text) and the step's run time (seconds).
select pgqueue.workflow_checkpoint(%s::uuid, %s::bigint, %s::integer, %s::text, %s::text, %s::jsonb,
                                   %s::double precision)
