-- issue 27: context.transaction(name, pipeline=False)'s end: the step's checkpoint inside the block's
-- own transaction and the COMMIT, two statements in one simple query (the arguments bound
-- client-side), so one round trip without a pipeline. Any refusal raises (SQLSTATE PGQ10 not_yours, PGQ11 conflict, PGQ12 the
-- transaction is not the block's any more), and the server then skips the COMMIT after it: the
-- transaction is aborted, nothing of the block commits.
-- Arguments: job id, token, seq, name, the step's run time (seconds), the block's mark.
select pgqueue.workflow_checkpoint(%s::uuid, %s::bigint, %s::integer, %s::text, 'transaction', null,
                                   %s::double precision, %s::text);
commit
