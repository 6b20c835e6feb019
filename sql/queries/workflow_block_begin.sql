-- issue 27: a workflow's context.transaction(name, pipeline=False) block: BEGIN its transaction and
-- mark it as the block's (a transaction-local setting, gone once the transaction ends), in one simple
-- query (the argument bound client-side): pgqueue.workflow_checkpoint refuses a checkpoint in any
-- other transaction (SQLSTATE PGQ12), e.g. one the handler began after ending the block's.
-- Argument: the block's mark (its reservation's token and the step's seq).
begin;
select set_config('pgqueue.workflow_block', %s::text, true)
