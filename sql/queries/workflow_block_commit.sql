-- issue 27: the COMMIT of a pipelined context.transaction(name) block, queued after its checkpoint
-- (workflow_block_checkpoint.sql): skipped by the server if anything before it in the pipeline failed.
commit
