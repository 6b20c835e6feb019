-- issue 27: the first context.transaction() block of a workflow's attempt: its recorded steps (what
-- the attempt replays; none on a first run), then BEGIN the block's transaction and read its id, in
-- one simple query (the argument bound client-side): one round trip where a first run took two.
-- Argument: the workflow's id.
select s.seq, s.name, s.kind, s.state, s.result::text as result, s.error, s.attempts, s.started_at, s.ended_at,
       s.wake_at, s.signal, s.child_id
from pgqueue.workflow_steps_of(%s::uuid) s;
begin;
select pg_current_xact_id()::text
