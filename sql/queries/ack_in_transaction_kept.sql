-- issue 26: context.transaction() of a job whose result is kept: as ack_in_transaction.sql, but the
-- ack leaves a pending result (pgqueue.ack_results with a null result, fenced by the token), which
-- store_result.sql fills once the handler returns. Arguments: the block's transaction id, the job
-- id, the token and the seconds to keep the result.
select case when pg_current_xact_id()::text = %s::text
            then (select a.acked from pgqueue.ack_results(array[%s::uuid], array[%s::bigint], null, null, false,
                                                          array[null]::jsonb[], array[%s::double precision]) a) end
