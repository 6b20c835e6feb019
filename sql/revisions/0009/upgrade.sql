-- pgqueue revision 0009: what the next features keep in the database (filled in by their changes).
-- Executed by the alembic revision 0009 (migrations/versions/), before its functions.

-- issue 29: workers
-- Every running worker, registered when it starts (pgqueue.register_worker), refreshed by its
-- heartbeat (pgqueue.refresh_worker) and deleted when it stops cleanly (pgqueue.deregister_worker).
-- A row whose heartbeat_at is older than stale_after seconds is a worker that is gone.
create table pgqueue.workers (
    id           uuid             primary key,
    host         text             not null,
    pid          integer          not null,   -- the worker's process id on its host
    queues       text[]           not null,
    concurrency  integer          not null,
    prefetch     integer          not null,
    version      text             not null,   -- the pgqueue version it runs
    started_at   timestamptz      not null default now(),
    heartbeat_at timestamptz      not null default now(),
    stale_after  double precision not null,   -- seconds without a refresh after which it is gone
    held         uuid[]           not null default '{}'   -- the jobs it held (running or prefetched) at its last refresh
);

comment on table pgqueue.workers is
    'pgqueue: running workers (host, pid, queues, concurrency, version, last heartbeat); stale rows are workers that are gone.';

-- issue 26: results
-- Every failed attempt of a job, one row each, keyed by the job id (not copied along with the job):
-- the job's moves (fail, cancel, reserve's doomed path, retry_failed, retry_failed_all) need not
-- carry it, so none of those functions pays for it and none can drop it. A retry's row is written
-- by pgqueue.release (with the error); a terminal failure's by the trigger on failed_jobs, from the
-- failure record itself (the worker and the run time are the two columns added to failed_jobs).
-- Pruned by pgqueue.prune_results once the job is gone (no live job, no failure, no kept result).
alter table pgqueue.failed_jobs
    add column worker text,                -- the worker whose attempt failed (host:pid); null when decided in SQL
    add column duration double precision;  -- that attempt's handler run time, seconds
-- A handler's return value that cannot be kept (not JSON, too large, not its declared type).
alter table pgqueue.failed_jobs drop constraint failed_jobs_reason;
alter table pgqueue.failed_jobs add constraint failed_jobs_reason check (reason in (
    'exception', 'attempts_exhausted', 'deadline_passed',
    'lease_expired_after_final_attempt', 'payload_invalid', 'unknown_job', 'failed_by_handler', 'cancelled',
    'result_invalid'));
create table pgqueue.attempt_failures (
    job_id     uuid             not null,
    attempt    integer          not null,      -- the job's attempts count when it failed (restarts after retry_failed)
    failed_at  timestamptz      not null default now(),
    reason     text             not null,      -- 'retried', or the failure's reason (see failed_jobs.reason)
    exception  text,
    message    text             not null default '',
    traceback  text,
    worker     text,
    duration   double precision
);
create index attempt_failures_job_id_idx on pgqueue.attempt_failures (job_id, failed_at);
create index attempt_failures_failed_at_idx on pgqueue.attempt_failures (failed_at);
comment on table pgqueue.attempt_failures is
    'pgqueue: every failed attempt of each job (kept across retries and retry_failed). May hold business data from tracebacks: restrict access.';
-- The handler's return value of a succeeded job, kept until expires_at (its result_ttl) and written
-- by pgqueue.ack_results in the ack's own fenced statement. A row with a token is pending: the job
-- was acked inside context.transaction() and pgqueue.store_result, fenced by that token, writes
-- the value once the handler returns.
create table pgqueue.job_results (
    job_id      uuid        primary key,
    queue       text        not null,
    name        text        not null,
    attempts    integer     not null,
    result      jsonb,                          -- null while pending
    token       bigint,                         -- the acked attempt's token while pending, else null
    finished_at timestamptz not null default now(),
    expires_at  timestamptz not null
);
create index job_results_expires_at_idx on pgqueue.job_results (expires_at);
comment on table pgqueue.job_results is
    'pgqueue: results of succeeded jobs (result_ttl). May hold business data: restrict access.';
-- A running handler's progress (context.progress: a fraction and/or a small JSON note, with the
-- attempt and the time), written fenced by its token through pgqueue.progress, at most about once
-- a second per job. Null until reported; a nullable column without a default costs the table
-- nothing until a job reports.
alter table pgqueue.jobs add column progress jsonb;
comment on column pgqueue.jobs.progress is
    'pgqueue: the running handler''s last progress report (pgqueue.progress): fraction, note, attempt, at.';
-- The end of a job (failed or cancelled) wakes whoever awaits it (channel pgqueue_ended,
-- payload: the job id), and its failure becomes an attempt of its history.
create trigger failed_jobs_recorded
    after insert on pgqueue.failed_jobs
    for each row
    execute function pgqueue.failure_recorded();

-- issue 26: dependencies and batches
-- A job with dependents (children waiting for it, or a batch counting it) is marked, so the ack
-- of every other job pays one boolean of its deleted row for this feature and nothing else.
alter table pgqueue.jobs add column has_dependents boolean not null default false;
comment on column pgqueue.jobs.has_dependents is
    'pgqueue: jobs wait for this one or a batch counts it: its end goes through pgqueue.jobs_ended.';
-- A child cancelled because a job it waited for failed or was cancelled.
alter table pgqueue.failed_jobs drop constraint failed_jobs_reason;
alter table pgqueue.failed_jobs add constraint failed_jobs_reason check (reason in (
    'exception', 'attempts_exhausted', 'deadline_passed',
    'lease_expired_after_final_attempt', 'payload_invalid', 'unknown_job', 'failed_by_handler', 'cancelled',
    'result_invalid', 'dependency_failed'));
-- What waits for what: one row per (parent, child) whose parent has not ended yet; the row goes
-- when the parent ends (pgqueue.jobs_ended), so the table holds only waits still open.
create table pgqueue.job_dependencies (
    parent_id uuid not null,
    child_id  uuid not null,
    primary key (parent_id, child_id)
);
create index job_dependencies_child_id_idx on pgqueue.job_dependencies (child_id);
comment on table pgqueue.job_dependencies is
    'pgqueue: open waits: the child job runs once every parent listed here has ended (succeeded, or by its policy).';
-- Each job dispatched with parents (pgqueue.add_dependencies): all its parents, how many it still
-- waits for (a row lock serialises the parents' ends: the last one releases it, exactly once), what
-- a failed parent does to it, and when it is due once released (its dispatch delay). While it
-- waits its jobs row has available_at = pgqueue.never() (9999-01-01), which no reservation and no
-- next_due reaches. Kept after the job ends until pgqueue.prune_results finds the job gone
-- (for the history's retention).
create table pgqueue.dependent_jobs (
    job_id            uuid        primary key,
    parents           uuid[]      not null,
    waiting_on        integer     not null,
    on_parent_failure text        not null,
    available_at      timestamptz not null,
    created_at        timestamptz not null default now(),
    released_at       timestamptz,
    constraint dependent_jobs_on_parent_failure check (on_parent_failure in ('cancel', 'run')),
    constraint dependent_jobs_waiting_on check (waiting_on >= 0)
);
create index dependent_jobs_created_at_idx on pgqueue.dependent_jobs (created_at);
comment on table pgqueue.dependent_jobs is
    'pgqueue: jobs dispatched with parents: every parent, how many are still open, the failure policy, when released.';
-- A batch: its members' ends are counted here (one row, updated in the statement that ends each
-- member; the update that brings pending to 0 releases the callback, exactly once).
create table pgqueue.batches (
    id          uuid        primary key,
    callback_id uuid        not null,               -- the job that runs once every member has ended
    total       integer     not null,
    pending     integer     not null,               -- members not ended yet
    succeeded   integer     not null default 0,
    failed      integer     not null default 0,
    cancelled   integer     not null default 0,     -- cancelled, or dependency_failed
    created_at  timestamptz not null default now(),
    finished_at timestamptz,                        -- when the last member ended (the callback's release)
    constraint batches_counts check (pending >= 0 and pending + succeeded + failed + cancelled = total)
);
create index batches_callback_id_idx on pgqueue.batches (callback_id);
create index batches_finished_at_idx on pgqueue.batches (finished_at);
create table pgqueue.batch_members (
    job_id   uuid primary key,
    batch_id uuid not null,
    outcome  text,                                  -- null until the member ends: succeeded, failed, cancelled
    constraint batch_members_outcome check (outcome in ('succeeded', 'failed', 'cancelled'))
);
create index batch_members_batch_id_idx on pgqueue.batch_members (batch_id);
comment on table pgqueue.batches is
    'pgqueue: batches (pgqueue.add_batch): members ended so far by outcome, and the callback released when none is pending.';
comment on table pgqueue.batch_members is
    'pgqueue: the members of each batch and how each ended (null: not yet).';
