-- pgqueue schema at head: the schema, the token sequence, the tables with their constraints,
-- indexes and storage settings, the stats view and their comments, written as they are after the
-- newest revision (not as the revisions' deltas). A fresh database at head runs this file, then the
-- newest version of every function (sql/functions/<name>/), then head/triggers.sql, and is stamped
-- with the head revision (pgqueue.migration_support.install_head). The revisions themselves never
-- run it. tests/test_migrations.py checks that the result is the catalog of a database upgraded
-- through every revision; a revision that changes a table changes this file too.
--
-- Columns come in the order an upgraded database has them (a column a later revision added
-- comes after the older ones), so both have the same row types and the same `select *`.

-- The functions come next in name order, not in the order the revisions created them: a SQL
-- function's body that calls one created later (queue_name_problem calls shown) is checked when
-- it is called, not when it is created, as pg_dump does. For this install's transaction only.
set local check_function_bodies = off;

create schema if not exists pgqueue;

-- Fencing tokens. One value per reservation, never reused: a retried failure or a
-- re-reserved job always gets a token no earlier holder ever saw.
create sequence if not exists pgqueue.lease_token_seq as bigint;

create table pgqueue.jobs (
    id            uuid        primary key,                 -- the job's identity for life
    queue         text        not null,
    priority      smallint    not null default 0,           -- higher runs first within a queue
    envelope      jsonb       not null,                     -- what dispatch fixed; never rewritten
    attempts      integer     not null default 0,           -- reservations so far
    max_tries     integer     not null,                     -- copied from the envelope
    retry_until   timestamptz,                              -- deadline; null = none
    -- Ready: now() >= available_at and token is null. Delayed: available_at in the future.
    -- Reserved: token is not null; available_at then holds the lease expiry, so an
    -- expired lease is found by the very same index range as a ready job.
    available_at  timestamptz not null default now(),
    reserved_at   timestamptz,
    token         bigint,
    created_at    timestamptz not null default now(),
    -- Unique jobs (revision 0003): a job dispatched with a unique key in a state scope carries it.
    --   'queued': at most one job per key that is waiting (ready or delayed, token is null);
    --   'active': at most one job per key that is queued or running (the row exists at all).
    unique_key    text,
    unique_scope  text,
    snoozes       integer     not null default 0,           -- times snoozed (pgqueue.snooze), no try used
    due_at        timestamptz,                              -- when the current attempt became due
    prefetched    boolean     not null default false,       -- in a prefetch buffer on its final try, unstarted
    progress      jsonb,                                    -- issue 26: the running handler's last progress report
    -- issue 28: debounce. A debounced job holds its key from dispatch until it is first reserved
    -- (the trigger jobs_debounce_reserved drops it); debounce_until: the latest it may be pushed to.
    debounce_key  text,
    debounce_until timestamptz,
    partition     text,                                     -- issue 28: the job's partition; null: none
    has_dependents boolean    not null default false,       -- issue 26: jobs wait for it or a batch counts it
    waiting       boolean     not null default false,       -- issue 28: granted beyond its limit's free slots, waits for one handed over
    heir_of       uuid,                                     -- issue 28: an heir in the slot this job's reservation took (reserve p_heirs)
    heir_of_token bigint,                                   -- the token of that reservation
    -- A queue name is 1 to 200 characters, has no comma (`--queue a,b` splits on commas), no
    -- control, format, separator or other invisible character anywhere (the ranges of
    -- pgqueue/limits.py, spelled out so that the rule depends on no locale or Unicode version) and
    -- no white space at either end (the characters Python's str.isspace() accepts).
    constraint jobs_queue_name check (
        length(queue) between 1 and 200
        and queue ~ '^[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]([^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]*[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000])?$'),
    constraint jobs_max_tries_positive check (max_tries >= 1),
    constraint jobs_attempts_non_negative check (attempts >= 0),
    constraint jobs_unique_scope check (
        (unique_scope is null and unique_key is null)
        or (unique_scope in ('queued', 'active') and unique_key is not null
            and length(unique_key) between 1 and 1000)),
    constraint jobs_snoozes_non_negative check (snoozes >= 0),
    constraint jobs_debounce_key check (debounce_key is null or octet_length(debounce_key) between 1 and 1000),
    -- issue 28: 1 to 200 characters, no control, format or invisible one (limits.QUEUE_NAME_REFUSED)
    constraint jobs_partition check (partition is null or (length(partition) between 1 and 200
        and partition !~ '[\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]'))
) with (
    -- The table is a conveyor belt: every row is inserted, updated once or twice and
    -- deleted within seconds, so its live size is small while dead tuples pile up at
    -- the job rate. Vacuum after a fixed number of dead rows instead of a fraction of a
    -- (tiny) table, without cost-based throttling, so the reservation index stays dense.
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 50000,
    autovacuum_analyze_scale_factor = 0.0,
    autovacuum_analyze_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0,
    -- issue 27 (WAL): half of each page kept free at insert, so that a reservation's new row version
    -- lands on its page and its WAL record logs only the changed bytes, not the envelope
    fillfactor = 50
);

-- The one index the reservation needs: per queue and priority, ready jobs and expired
-- leases come first in available_at order; delayed jobs and live leases sort after them
-- and are never visited by a reservation. next_due() reads the same index.
create index jobs_reservation_idx on pgqueue.jobs (queue, priority, available_at);

-- The two partial unique indexes are the whole enforcement of unique keys: pgqueue.enqueue_unique
-- inserts with ON CONFLICT DO NOTHING, so concurrent producers of one key give exactly one row.
-- Jobs without a key (unique_key null) are in neither index.
-- issue 28: only partitioned jobs are in these: reserve walks a partitioned queue partition by
-- partition with the first, and counts a partition's running jobs with the second.
create index jobs_partition_idx on pgqueue.jobs (queue, priority, partition, available_at)
    where partition is not null;
create index jobs_partition_running_idx on pgqueue.jobs (queue, partition, available_at)
    where token is not null and partition is not null;

create unique index jobs_unique_queued_idx on pgqueue.jobs (unique_key)
    where unique_scope = 'queued' and token is null;
create unique index jobs_unique_active_idx on pgqueue.jobs (unique_key)
    where unique_scope = 'active';

-- issue 28: one waiting (never reserved) job per debounce key; pgqueue.enqueue_debounced upserts on it.
create unique index jobs_debounce_idx on pgqueue.jobs (debounce_key) where debounce_key is not null;

-- issue 28, slot heirs: a slot's heirs (is the slot still held?), found when reserve is asked for more.
create index jobs_heir_idx on pgqueue.jobs (heir_of) where heir_of is not null;

comment on table pgqueue.jobs is
    'pgqueue: ready, delayed and reserved jobs. Change rows only through the pgqueue.* functions.';
comment on column pgqueue.jobs.progress is
    'pgqueue: the running handler''s last progress report (pgqueue.progress): fraction, note, attempt, at.';
comment on column pgqueue.jobs.partition is
    'pgqueue: the job''s partition (dispatch partition= or the job type''s partition_by); null: none.';
comment on column pgqueue.jobs.has_dependents is
    'pgqueue: jobs wait for this one or a batch counts it: its end goes through pgqueue.jobs_ended.';
comment on column pgqueue.jobs.waiting is
    'pgqueue: granted beyond its queue''s free slots (reserve p_waiting): not counted in the limit until handed a slot (hand_over).';
comment on column pgqueue.jobs.heir_of is
    'pgqueue: an heir (reserve p_heirs): the job whose reservation took the slot it runs in, after that job and the heirs before it.';
comment on column pgqueue.jobs.heir_of_token is
    'pgqueue: the token of heir_of''s reservation that took the slot (a later reservation of that job is another slot).';
comment on column pgqueue.jobs.prefetched is
    'pgqueue: on its final try in a worker''s prefetch buffer, not started yet (pgqueue.mark_started clears it first).';

create table pgqueue.failed_jobs (
    id          uuid        primary key default gen_random_uuid(),  -- the failure id
    job_id      uuid        not null,
    connection  text        not null,
    queue       text        not null,
    envelope    jsonb       not null,
    attempts    integer     not null,
    exception   text,                   -- exception class, module-qualified; null for reasons decided in SQL
    message     text        not null default '',
    traceback   text,
    reason      text        not null,
    failed_at   timestamptz not null default now(),
    worker      text,                   -- issue 26: the worker whose attempt failed (host:pid); null when decided in SQL
    duration    double precision,       -- issue 26: that attempt's handler run time, seconds
    partition   text generated always as (envelope->>'partition') stored,  -- issue 28: the job's partition
    constraint failed_jobs_reason check (reason in (
        'exception', 'attempts_exhausted', 'deadline_passed',
        'lease_expired_after_final_attempt', 'payload_invalid', 'unknown_job', 'failed_by_handler', 'cancelled',
        'result_invalid', 'dependency_failed'))  -- issue 26: result_invalid, dependency_failed
);

create index failed_jobs_failed_at_idx on pgqueue.failed_jobs (failed_at desc);
create index failed_jobs_queue_failed_at_idx on pgqueue.failed_jobs (queue, failed_at desc);
create index failed_jobs_job_id_idx on pgqueue.failed_jobs (job_id);

comment on table pgqueue.failed_jobs is
    'pgqueue: terminal failures. May hold business data from job args and tracebacks: restrict access.';

-- Unique for a period after dispatch, even once the job has finished (and been deleted):
-- one row per key, taken over by the next dispatch only after it expired.
create table pgqueue.unique_keys (
    key         text        primary key,
    job_id      uuid        not null,
    expires_at  timestamptz not null,
    constraint unique_keys_key_length check (length(key) between 1 and 1000)
);

-- Expired keys are pruned by pgqueue.prune_ticks_and_keys (the workers' maintenance), oldest first.
create index unique_keys_expires_at_idx on pgqueue.unique_keys (expires_at);

comment on table pgqueue.unique_keys is
    'pgqueue: unique keys with a period (unique_for); a dispatch of a key whose row has not expired is a duplicate.';

-- Periodic jobs. Workers declare the schedules of their code here (pgqueue.schedule_sync) and
-- enqueue each tick through pgqueue.enqueue_tick, whose primary key on (schedule, tick) makes
-- every tick enqueued exactly once, whichever worker of whichever host gets there first.
create table pgqueue.schedules (
    name        text        primary key,          -- the job name
    expression  text        not null,             -- cron (5 fields) or 'every <n>s'
    timezone    text        not null,
    catch_up    integer     not null,             -- missed ticks enqueued after downtime
    changed_at  timestamptz not null default now(),  -- first seen, or expression/timezone changed
    seen_at     timestamptz not null default now(),  -- a worker with this schedule last looked
    -- Registered with the schedule (pgqueue.schedule_sync): the most seconds between two of its
    -- ticks, and the template of its jobs' envelope (all of it but the id); pgqueue.enqueue_tick
    -- builds each tick's job from them and refuses a tick outside the schedule's catch-up window.
    period_seconds bigint,
    template    jsonb,
    constraint schedules_catch_up_positive check (catch_up >= 1),
    constraint schedules_period_positive check (period_seconds >= 1),
    constraint schedules_template_object check (jsonb_typeof(template) = 'object')
);

create table pgqueue.schedule_ticks (
    schedule     text        not null,
    tick         timestamptz not null,
    job_id       uuid        not null,
    enqueued_at  timestamptz not null default clock_timestamp(),
    primary key (schedule, tick)
);

comment on table pgqueue.schedules is
    'pgqueue: periodic jobs as declared by the code of the workers that last ran.';
comment on table pgqueue.schedule_ticks is
    'pgqueue: one row per enqueued tick of a schedule (exactly once: primary key on schedule, tick).';

-- What an operator set on a queue: paused, a global concurrency limit (at most N jobs of the
-- queue reserved at once, across every worker), and a rate limit: a token bucket refilled at
-- rate_limit per rate_period, of capacity rate_burst (null: the rate per period), so any window
-- of T seconds sees at most rate * T + burst reservations. A queue without a row has no control:
-- the reservation pays one primary-key probe and nothing else.
create table pgqueue.queues (
    name             text             primary key,
    paused           boolean          not null default false,
    concurrency      integer,
    rate_limit       integer,
    rate_period      interval,
    -- The token bucket: tokens left at rate_refilled_at.
    rate_tokens      double precision not null default 1,
    rate_refilled_at timestamptz      not null default now(),
    updated_at       timestamptz      not null default now(),
    rate_burst       integer,
    -- issue 28: the limits every partition of the queue gets (pgqueue.set_partition_limits), whether
    -- it is served partition by partition, and the partition served last (the next round starts after it).
    partition_concurrency integer,
    partition_rate_limit  integer,
    partition_rate_period interval,
    partition_rate_burst  integer,
    partition_fair        boolean not null default false,
    partitioned           boolean not null default false,
    partition_cursor      text,
    partition_credit      integer not null default 0,
    constraint queues_partition_concurrency check (partition_concurrency is null or partition_concurrency >= 1),
    constraint queues_partition_rate check ((partition_rate_limit is null) = (partition_rate_period is null)
        and (partition_rate_limit is null or partition_rate_limit >= 1)
        and (partition_rate_period is null or partition_rate_period > interval '0')
        and (partition_rate_burst is null or (partition_rate_burst >= 1 and partition_rate_limit is not null))),
    -- issue 28: adaptive limits (pgqueue.set_adaptive_limit): concurrency moves within these bounds.
    adaptive_min     integer,
    adaptive_max     integer,
    adaptive_acks    integer          not null default 0,   -- acks since the limit last moved
    adaptive_cut_at  timestamptz,                           -- when backpressure last halved the limit
    constraint queues_concurrency_positive check (concurrency is null or concurrency >= 1),
    constraint queues_rate check ((rate_limit is null) = (rate_period is null)
                                  and (rate_limit is null or rate_limit >= 1)
                                  and (rate_period is null or rate_period > interval '0')),
    constraint queues_rate_burst check (rate_burst is null or (rate_burst >= 1 and rate_limit is not null)),
    constraint queues_adaptive check ((adaptive_min is null) = (adaptive_max is null)
                                      and (adaptive_min is null or (adaptive_min >= 1 and adaptive_max >= adaptive_min))),
    -- issue 28: adaptive limits per partition, and a configurable cut (revision 0010). A cut leaves
    -- floor(limit x adaptive_decrease), at least one less, never below the minimum (the queue's limit
    -- and its partitions'). partition_adaptive_min/max: the bounds every partition's concurrency moves
    -- in (partition_concurrency: where a partition without a row starts); partition_adaptive: whether
    -- any partition of the queue is adaptive (these bounds or a named one's), probed by pgqueue.ack.
    adaptive_decrease      double precision not null default 0.9,
    partition_adaptive_min integer,
    partition_adaptive_max integer,
    partition_adaptive     boolean not null default false,
    -- issue 28: priority aging (pgqueue.set_aging): a ready job counts one priority level higher
    -- per this much waited (null: no aging).
    aging            interval,
    constraint queues_adaptive_decrease check (adaptive_decrease > 0 and adaptive_decrease < 1),
    constraint queues_partition_adaptive check ((partition_adaptive_min is null) = (partition_adaptive_max is null)
        and (partition_adaptive_min is null
             or (partition_adaptive_min >= 1 and partition_adaptive_max >= partition_adaptive_min))),
    constraint queues_aging check (aging is null or aging > interval '0')
);

-- What pgqueue.ack probes to learn whether any queue is adaptive: empty unless one is.
create index queues_adaptive_idx on pgqueue.queues (name) where adaptive_min is not null or partition_adaptive;

comment on table pgqueue.queues is
    'pgqueue: per-queue controls (paused, concurrency and rate limits). Change rows only through pgqueue.pause, pgqueue.resume and pgqueue.set_limits.';
comment on column pgqueue.queues.rate_burst is
    'pgqueue: the token bucket''s capacity (most reservations at once); null: rate_limit, the rate per period.';

-- Per-minute aggregates per queue and job name, written by the stored functions that already
-- run with each outcome (ack, release, fail, cancel, and reserve's doomed path), so recording
-- history costs no extra round trip. Concurrent writers of the same minute are spread over a few
-- rows (shard = the writing backend's pid modulo 8) so that many workers acking at once do not
-- queue up on one hot row: read with sum() over the shards (group by minute, queue, name).
-- Pruned in batches by the workers' maintenance after its retention (default 7 days).
create table pgqueue.job_stats (
    minute         timestamptz      not null,   -- the minute (database clock) the outcome was recorded
    queue          text             not null,
    name           text             not null,   -- the job name ('?' if the envelope has none)
    shard          smallint         not null,
    succeeded      bigint           not null default 0,   -- acked
    failed         bigint           not null default 0,   -- moved to failed_jobs (any reason but cancelled)
    retried        bigint           not null default 0,   -- released for a retry
    cancelled      bigint           not null default 0,   -- cancelled with pgqueue.cancel
    -- Handler run time, of the outcomes whose worker reported it (duration_count of them).
    duration_count bigint           not null default 0,
    duration_sum   double precision not null default 0,   -- seconds
    duration_max   double precision,
    -- Queue latency: from the time the attempt was due to its handler's start.
    latency_count  bigint           not null default 0,
    latency_sum    double precision not null default 0,   -- seconds
    latency_max    double precision,
    given_back     bigint           not null default 0,   -- interrupted by the worker (a forced stop), try given back
    primary key (minute, queue, name, shard)
);

comment on table pgqueue.job_stats is
    'pgqueue: per-minute outcome counts, handler durations and queue latencies per queue and job name (sum over shard).';
comment on column pgqueue.job_stats.given_back is
    'pgqueue: attempts the worker interrupted (a forced stop) and gave back with their try (pgqueue.release_interrupted).';

-- With keep_completed on, a copy of each acked job (written by the same statement as the ack),
-- kept for audit until the workers' maintenance prunes it.
create table pgqueue.completed_jobs (
    job_id       uuid             not null,
    queue        text             not null,
    envelope     jsonb            not null,   -- args, name, tries, ... as dispatched
    attempts     integer          not null,
    created_at   timestamptz      not null,   -- dispatched
    due_at       timestamptz,                 -- the last attempt became due
    reserved_at  timestamptz,                 -- the last attempt was reserved
    finished_at  timestamptz      not null default now(),
    duration     double precision,            -- the last attempt's handler run time, seconds
    latency      double precision             -- the last attempt's queue latency, seconds
);

create index completed_jobs_finished_at_idx on pgqueue.completed_jobs (finished_at);
create index completed_jobs_job_id_idx on pgqueue.completed_jobs (job_id);

comment on table pgqueue.completed_jobs is
    'pgqueue: acked jobs kept for audit (keep_completed). May hold business data from job args: restrict access.';

-- Per-queue counts for operators: select * from pgqueue.queue_stats;
create view pgqueue.queue_stats as
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

-- issue 28: partitions
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
    constraint partitions_weight check (weight is null or weight between 1 and 1000),
    -- issue 28: adaptive limits per partition (revision 0010): its own bounds (null: the queue's
    -- partition_adaptive_min/max), whether concurrency is the adaptive limit's current value (not an
    -- operator's fixed override), the acks of its window and when backpressure last cut it.
    adaptive_min     integer,
    adaptive_max     integer,
    adaptive_limit   boolean          not null default false,
    adaptive_acks    integer          not null default 0,
    adaptive_cut_at  timestamptz,
    constraint partitions_adaptive check ((adaptive_min is null) = (adaptive_max is null)
        and (adaptive_min is null or (adaptive_min >= 1 and adaptive_max >= adaptive_min))
        and (not adaptive_limit or concurrency is not null))
);
comment on table pgqueue.partitions is
    'pgqueue: per-partition overrides (concurrency, rate, weight) and token buckets. Change overrides only through pgqueue.set_partition_limit.';
-- issue 26: dependencies and batches
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
-- issue 26 (revision 0010): a job's children, ended or not (pgqueue.job_family), by parent id
create index dependent_jobs_parents_idx on pgqueue.dependent_jobs using gin (parents);
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
    -- issue 27 (WAL): no unique (job_id, name) index: a name at another seq is refused by the fenced
    -- functions, under the job's row lock, reading the job's steps through the primary key (one index
    -- entry less per step)
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
