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
-- issue 27: the live workflows among the jobs (the view pgqueue.workflows and the overview's counts
-- read them through it: their cost follows the number of workflows, not of jobs)
create index jobs_workflows_idx on pgqueue.jobs (id) where envelope ? 'workflow';
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
select 1;
-- issue 26: the children of a job after they stopped waiting (pgqueue.job_family 0010), by parent id
create index dependent_jobs_parents_idx on pgqueue.dependent_jobs using gin (parents);

-- issue 28: adaptive limits per partition, and a configurable cut
-- The multiplicative decrease of a queue's adaptive limits (its own and its partitions'): a cut
-- leaves floor(limit x adaptive_decrease), at least one less, never below the minimum. 0.9 by
-- default (revision 0009 halved: 0.5).
alter table pgqueue.queues
    add column adaptive_decrease double precision not null default 0.9,
    -- The bounds every partition's concurrency limit moves in (pgqueue.set_partition_adaptive_limit
    -- with a null partition); partition_concurrency is where a partition without a row starts.
    add column partition_adaptive_min integer,
    add column partition_adaptive_max integer,
    -- Whether any partition of the queue is adaptive (these bounds, or a named partition's own):
    -- what pgqueue.ack probes, with adaptive_min, through queues_adaptive_idx.
    add column partition_adaptive boolean not null default false,
    add constraint queues_adaptive_decrease check (adaptive_decrease > 0 and adaptive_decrease < 1),
    add constraint queues_partition_adaptive check ((partition_adaptive_min is null) = (partition_adaptive_max is null)
        and (partition_adaptive_min is null
             or (partition_adaptive_min >= 1 and partition_adaptive_max >= partition_adaptive_min)));
-- A partition's adaptive state: its own bounds (null: the queue's partition_adaptive_min/max), whether
-- its concurrency is the adaptive limit's current value (not an operator's fixed override), the
-- acks of its window and when backpressure last cut it.
alter table pgqueue.partitions
    add column adaptive_min integer,
    add column adaptive_max integer,
    add column adaptive_limit boolean not null default false,
    add column adaptive_acks integer not null default 0,
    add column adaptive_cut_at timestamptz,
    add constraint partitions_adaptive check ((adaptive_min is null) = (adaptive_max is null)
        and (adaptive_min is null or (adaptive_min >= 1 and adaptive_max >= adaptive_min))
        and (not adaptive_limit or concurrency is not null));
-- What pgqueue.ack probes: empty unless a queue or one of its partitions is adaptive.
drop index pgqueue.queues_adaptive_idx;
create index queues_adaptive_idx on pgqueue.queues (name) where adaptive_min is not null or partition_adaptive;
-- end issue 28

-- issue 28: priority aging (pgqueue.set_aging, pgqueue.aged_priority, read by pgqueue.reserve)
alter table pgqueue.queues add column aging interval,
    add constraint queues_aging check (aging is null or aging > interval '0');
