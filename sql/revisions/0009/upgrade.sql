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

-- issue 28: partitions
-- A job's partition (a tenant, a customer, an API key): copied by enqueue from the envelope's
-- "partition" (absent for a plain job, which pays one key look-up and stores a null). 1 to 200
-- characters, none of them a control, format or other invisible character (the ranges of
-- pgqueue/limits.py QUEUE_NAME_REFUSED; commas are allowed). Only partitioned jobs are in the two
-- partial indexes: the one reserve walks partition by partition, and the one it counts a
-- partition's running jobs with.
alter table pgqueue.jobs add column partition text,
    add constraint jobs_partition check (partition is null or (length(partition) between 1 and 200
        and partition !~ '[\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]'));
comment on column pgqueue.jobs.partition is
    'pgqueue: the job''s partition (dispatch partition= or the job type''s partition_by); null: none.';
create index jobs_partition_idx on pgqueue.jobs (queue, priority, partition, available_at)
    where partition is not null;
create index jobs_partition_running_idx on pgqueue.jobs (queue, partition, available_at)
    where token is not null and partition is not null;
-- A failure keeps its job's partition: computed from the envelope, which dispatch fixed.
alter table pgqueue.failed_jobs add column partition text generated always as (envelope->>'partition') stored;
-- The limits every partition of a queue gets (pgqueue.set_partition_limits), and whether the queue
-- is served partition by partition (partitioned: any per-partition limit, override or fair shares).
-- partition_cursor: the partition served last, where the next reservation's round goes on;
-- partition_credit: what is left of that partition's turn (pgqueue.reserve_partitions).
alter table pgqueue.queues
    add column partition_concurrency integer,
    add column partition_rate_limit  integer,
    add column partition_rate_period interval,
    add column partition_rate_burst  integer,
    add column partition_fair        boolean not null default false,
    add column partitioned           boolean not null default false,
    add column partition_cursor      text,
    add column partition_credit      integer not null default 0,
    add constraint queues_partition_concurrency check (partition_concurrency is null or partition_concurrency >= 1),
    add constraint queues_partition_rate check ((partition_rate_limit is null) = (partition_rate_period is null)
        and (partition_rate_limit is null or partition_rate_limit >= 1)
        and (partition_rate_period is null or partition_rate_period > interval '0')
        and (partition_rate_burst is null or (partition_rate_burst >= 1 and partition_rate_limit is not null)));
-- One row per partition that has an override (pgqueue.set_partition_limit: its own concurrency,
-- rate or weight) or a token bucket in use (written by reserve, for a partition under a rate).
create table pgqueue.partitions (
    queue            text             not null,
    partition        text             not null,
    concurrency      integer,          -- override of the queue's partition_concurrency; null: the queue's
    rate_limit       integer,          -- override of the queue's partition rate (with rate_period, rate_burst)
    rate_period      interval,
    rate_burst       integer,
    weight           integer,          -- its fair share weight; null: 1
    rate_tokens      double precision, -- the bucket: tokens left at rate_refilled_at; null: full
    rate_refilled_at timestamptz,
    updated_at       timestamptz      not null default now(),
    primary key (queue, partition),
    constraint partitions_concurrency check (concurrency is null or concurrency >= 1),
    constraint partitions_rate check ((rate_limit is null) = (rate_period is null)
        and (rate_limit is null or rate_limit >= 1)
        and (rate_period is null or rate_period > interval '0')
        and (rate_burst is null or (rate_burst >= 1 and rate_limit is not null))),
    constraint partitions_weight check (weight is null or weight between 1 and 1000)
);
comment on table pgqueue.partitions is
    'pgqueue: per-partition overrides (concurrency, rate, weight) and token buckets. Change overrides only through pgqueue.set_partition_limit.';
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

-- issue 26: the queue_stats view counts the jobs waiting for parents or a batch as blocked, apart from
-- delayed (a column added at the end: create or replace keeps its grants).
create or replace view pgqueue.queue_stats as
with live as (
    select queue,
           count(*) filter (where token is null and available_at <= now())       as ready,
           count(*) filter (where token is null and available_at > now()
                            and available_at < '9999-01-01 00:00:00+00')         as delayed,
           count(*) filter (where token is not null and available_at > now())    as reserved,
           count(*) filter (where token is not null and available_at <= now())   as expired,
           max(now() - available_at) filter (where token is null and available_at <= now())
                                                                                 as oldest_ready_age,
           -- issue 26: waiting for parents or a batch (available_at = pgqueue.never())
           count(*) filter (where token is null and available_at >= '9999-01-01 00:00:00+00')
                                                                                 as blocked
    from pgqueue.jobs
    group by queue
), dead as (
    select queue, count(*) as failed from pgqueue.failed_jobs group by queue
)
select coalesce(live.queue, dead.queue)      as queue,
       coalesce(live.ready, 0)               as ready,
       coalesce(live.delayed, 0)             as delayed,
       coalesce(live.reserved, 0)            as reserved,
       coalesce(live.expired, 0)             as expired,
       coalesce(dead.failed, 0)              as failed,
       live.oldest_ready_age                 as oldest_ready_age,
       coalesce(live.blocked, 0)             as blocked
from live full join dead on dead.queue = live.queue;

comment on view pgqueue.queue_stats is
    'pgqueue: per queue, ready / delayed / reserved / expired-lease / failed counts, the age of the oldest ready job, and the jobs blocked waiting for parents or a batch.';
