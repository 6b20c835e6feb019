-- context.transaction(): the fenced ack of one job, inside the handler's own transaction, and only
-- while that is still the transaction the block began (the id transaction_begin.sql read at its BEGIN).
-- Null when it is not (the handler ran COMMIT or ROLLBACK on the block's connection: this runs in a
-- later transaction, which the caller rolls back): the job is then not acknowledged. Else whether
-- the fence accepted the ack.
select case when pg_current_xact_id()::text = %s::text
            then (select a.acked from pgqueue.ack(array[%s::uuid], array[%s::bigint]) a) end
