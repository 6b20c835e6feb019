-- pgqueue revision 0010: what the next features keep in the database (filled in by their changes).
-- Executed by the alembic revision 0010 (migrations/versions/), before its functions.

-- issue 27: durable workflows
-- One row per checkpoint of a workflow (a job whose envelope carries "workflow": its version): the
-- seq-th step call of its function (step, transaction, sleep, signal wait, child job), what it
-- returned (result, JSON) or how it failed, written only by the fenced functions of a holder of the
-- job's current token (pgqueue.workflow_checkpoint and friends). A run of the workflow replays the
-- rows in seq order; a name at another seq, or another kind at a seq, is a change of code between
-- runs (the workflow then fails: its determinism guard). Kept after the workflow ends until its
-- result expires (pgqueue.prune_workflows, in the workers' maintenance); a failed or cancelled
-- workflow's steps are kept while its failure record is (a retry_failed resumes it where it failed).
create table pgqueue.workflow_steps (
    job_id     uuid        not null,
    seq        integer     not null,               -- 1-based order of the step call in the function
    name       text        not null,
    kind       text        not null,
    state      text        not null,               -- succeeded, retrying, failed, waiting, timed_out
    result     jsonb,                              -- the step's return value, a signal's payload
    error      text,                               -- the last failure of a step (exception: message)
    attempts   integer     not null default 0,     -- runs of the step's function (a step's own tries)
    started_at timestamptz not null default now(),
    ended_at   timestamptz,
    wake_at    timestamptz,                        -- sleep: when it ends; signal: its timeout (null: none)
    signal     text,                               -- signal: the awaited name
    child_id   uuid,                               -- child: the job dispatched
    primary key (job_id, seq),
    constraint workflow_steps_name_unique unique (job_id, name),
    constraint workflow_steps_seq check (seq >= 1),
    constraint workflow_steps_name check (length(name) between 1 and 200),
    constraint workflow_steps_kind check (kind in ('step', 'transaction', 'sleep', 'signal', 'child')),
    constraint workflow_steps_state check (state in ('succeeded', 'retrying', 'failed', 'waiting', 'timed_out'))
);
create index workflow_steps_child_id_idx on pgqueue.workflow_steps (child_id) where child_id is not null;
comment on table pgqueue.workflow_steps is
    'pgqueue: workflow checkpoints (issue 27): each step''s result or error, written fenced by the job''s token. May hold business data: restrict access.';
-- Signals sent to workflows (pgqueue.signal): kept until a wait_for of the name consumes the oldest
-- one (consumed_seq: the step that took it), so a signal sent before the wait is not lost.
create table pgqueue.workflow_signals (
    id           bigint      generated always as identity primary key,
    job_id       uuid        not null,
    name         text        not null,
    payload      jsonb,
    sent_at      timestamptz not null default now(),
    consumed_seq integer,
    constraint workflow_signals_name check (length(name) between 1 and 200)
);
create index workflow_signals_job_id_name_idx on pgqueue.workflow_signals (job_id, name, id);
comment on table pgqueue.workflow_signals is
    'pgqueue: signals sent to workflows, kept until a wait_for consumes them. May hold business data: restrict access.';
-- One row per live workflow (queued, running, sleeping or waiting), for operators: its state
-- (waiting: ready; delayed; running; sleeping; waiting_signal; waiting_child), the step it is at (the
-- last checkpoint's seq, name, kind and state), its wake time and the signal or child it awaits.
create view pgqueue.workflows as
select j.id, j.envelope->>'name' as name, (j.envelope->>'workflow')::integer as version, j.queue,
       case when j.token is not null then 'running'
            when s.state = 'waiting' and s.kind = 'sleep' then 'sleeping'
            when s.state = 'waiting' and s.kind = 'signal' then 'waiting_signal'
            when s.state = 'waiting' and s.kind = 'child' then 'waiting_child'
            when j.available_at > now() then 'delayed'
            else 'waiting' end as state,
       s.seq as step_seq, s.name as step_name, s.kind as step_kind, s.state as step_state,
       case when j.token is null and j.available_at < '9999-01-01 00:00:00+00'::timestamptz then j.available_at
       end as wake_at,
       case when s.state = 'waiting' then s.signal end as awaited_signal,
       case when s.state = 'waiting' then s.child_id end as awaited_child,
       j.attempts, j.max_tries as tries, j.created_at
from pgqueue.jobs j
left join lateral (select w.seq, w.name, w.kind, w.state, w.signal, w.child_id from pgqueue.workflow_steps w
                   where w.job_id = j.id order by w.seq desc limit 1) s on true
where j.envelope ? 'workflow';
comment on view pgqueue.workflows is
    'pgqueue: live workflows (issue 27): state, the step each is at, its wake time and what it awaits.';
