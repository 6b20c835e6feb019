-- issue 27: a workflow's pipelined context.transaction(name) block opens its transaction; queued in
-- pipeline mode with the mark (workflow_block_mark.sql), the block's statements, its checkpoint and
-- its COMMIT, all sent in one round trip.
begin
