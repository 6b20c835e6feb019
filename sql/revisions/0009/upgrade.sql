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

-- issue 28: debounce
-- A debounced job (pgqueue.enqueue_debounced) holds its key from its dispatch until it is first
-- reserved (the trigger below drops it then); debounce_until is the latest it may be pushed to
-- (the earliest deadline a dispatch of its window set; null: none). Two nullable columns without
-- a default cost the table nothing for jobs that are not debounced.
alter table pgqueue.jobs
    add column debounce_key text,
    add column debounce_until timestamptz;
alter table pgqueue.jobs add constraint jobs_debounce_key check (
    debounce_key is null or octet_length(debounce_key) between 1 and 1000);
create unique index jobs_debounce_idx on pgqueue.jobs (debounce_key) where debounce_key is not null;
create trigger jobs_debounce_reserved
    before update of token on pgqueue.jobs
    for each row
    when (new.debounce_key is not null and new.token is not null)
    execute function pgqueue.debounce_reserved();

-- issue 28: adaptive limits
-- A queue's concurrency limit may move AIMD-style within [adaptive_min, adaptive_max] (set by
-- pgqueue.set_adaptive_limit): pgqueue.backpressure halves it, pgqueue.ack grows it by one per
-- window of as many acks as the limit. concurrency holds the current limit (what reserve enforces).
alter table pgqueue.queues
    add column adaptive_min    integer,
    add column adaptive_max    integer,
    add column adaptive_acks   integer not null default 0,   -- acks since the limit last moved
    add column adaptive_cut_at timestamptz,                  -- when backpressure last halved the limit
    add constraint queues_adaptive check ((adaptive_min is null) = (adaptive_max is null)
                                          and (adaptive_min is null or (adaptive_min >= 1 and adaptive_max >= adaptive_min)));
-- What pgqueue.ack probes to learn whether any queue is adaptive: empty unless one is.
create index queues_adaptive_idx on pgqueue.queues (name) where adaptive_min is not null;
