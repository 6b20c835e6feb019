-- issue 27: mark the transaction of a pipelined context.transaction(name) block as the block's (a
-- transaction-local setting, gone once the transaction ends): pgqueue.workflow_checkpoint refuses a
-- checkpoint in any other transaction (SQLSTATE PGQ12).
-- Argument: the block's mark (its reservation's token and the step's seq).
select set_config('pgqueue.workflow_block', %s::text, true)
