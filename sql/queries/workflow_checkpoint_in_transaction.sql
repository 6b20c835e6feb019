-- issue 27: context.transaction(name): the step's checkpoint inside the block's own transaction, sent
-- with the COMMIT in one round trip: any refusal raises (SQLSTATE PGQ10 not_yours, PGQ11 conflict,
-- PGQ12 the transaction is not the block's any more), so the COMMIT that follows never runs.
-- Arguments: job id, token, seq, name, the step's run time (seconds), the block's transaction id.
select pgqueue.workflow_checkpoint(%s::uuid, %s::bigint, %s::integer, %s::text, 'transaction', null,
                                   %s::double precision, %s::text)
