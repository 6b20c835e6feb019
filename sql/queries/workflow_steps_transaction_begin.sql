-- issue 27: the first context.transaction() block of a workflow's attempt: its recorded steps (what
-- the attempt replays; none on a first run), then BEGIN the block's transaction and mark it as the
-- block's (workflow_block_begin.sql), in one simple query (the arguments bound client-side): one
-- round trip where a first run took two.
-- Arguments: the workflow's id, the block's mark.
select s.seq, s.name, s.kind, s.state, s.result::text as result, s.error, s.attempts, s.started_at, s.ended_at,
       s.wake_at, s.signal, s.child_id
from pgqueue.workflow_steps_of(%s::uuid) s;
begin;
select set_config('pgqueue.workflow_block', %s::text, true)
