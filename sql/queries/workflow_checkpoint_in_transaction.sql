-- issue 27: context.transaction(name): the step's checkpoint inside the block's own transaction, and
-- only while that is still the transaction the block began (the id transaction_begin.sql read at
-- its BEGIN); null when it is not (the handler ended it: the caller rolls back). Arguments: the
-- block's transaction id, then those of workflow_checkpoint.sql (kind 'transaction', no result).
select case when pg_current_xact_id()::text = %s::text
            then pgqueue.workflow_checkpoint(%s::uuid, %s::bigint, %s::integer, %s::text, 'transaction', null,
                                             %s::double precision) end
