-- issue 26: the completer's acknowledgement of jobs whose result is kept (pgqueue.ack_results);
-- returns only the refused ones. As ack.sql, plus per job its result (JSON text; null: pending)
-- and how many seconds to keep it. Jobs that keep no result never come here (ack.sql).
select id from pgqueue.ack_results(%b::uuid[], %b::bigint[], %b::double precision[], %b::double precision[],
                                   %s::boolean, %s::text[]::jsonb[], %b::double precision[])
where not acked
