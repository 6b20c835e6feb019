-- issue 27: pgqueue.workflow_steps_of(workflow id) -> its checkpoints in seq order
-- What a run of the workflow replays, and what workflow:show prints: each step's seq, name, kind,
-- state, result, error, runs, times, wake time, awaited signal and child job.
-- From psql:  select * from pgqueue.workflow_steps_of('<workflow id>');
create or replace function pgqueue.workflow_steps_of(p_id uuid)
returns table (seq integer, name text, kind text, state text, result jsonb, error text, attempts integer,
               started_at timestamptz, ended_at timestamptz, wake_at timestamptz, signal text, child_id uuid)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select s.seq, s.name, s.kind, s.state, s.result, s.error, s.attempts, s.started_at, s.ended_at, s.wake_at,
           s.signal, s.child_id
    from pgqueue.workflow_steps s
    where s.job_id = p_id
    order by s.seq
$$;

comment on function pgqueue.workflow_steps_of(uuid) is
    'pgqueue: a workflow''s checkpoints in order (issue 27).';
