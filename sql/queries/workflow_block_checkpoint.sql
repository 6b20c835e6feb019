-- issue 27: the checkpoint of a pipelined context.transaction(name) block, queued after the block's
-- statements and before its COMMIT (workflow_block_commit.sql) in the same pipeline sync: a refusal
-- raises (SQLSTATE PGQ10 not_yours, PGQ11 conflict, PGQ12 the transaction is not the block's any
-- more), and the server then skips every statement up to the sync, the COMMIT too: nothing of the
-- block commits. A failed statement of the block before it makes the server skip it and the COMMIT.
-- Arguments: job id, token, seq, name, the step's run time (seconds), the block's mark.
select pgqueue.workflow_checkpoint(%s::uuid, %s::bigint, %s::integer, %s::text, 'transaction', null,
                                   %s::double precision, %s::text)
