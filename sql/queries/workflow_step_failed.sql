-- issue 27: a workflow step's failed run counted: 'retrying' (parked for the backoff, no try used),
-- 'exhausted', 'not_yours' or 'conflict'. Arguments: job id, token, seq, name, error, tries, delay.
select pgqueue.workflow_step_failed(%s::uuid, %s::bigint, %s::integer, %s::text, %s::text, %s::integer,
                                    %s::double precision)
