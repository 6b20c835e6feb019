-- pgqueue schema, revision 0005 (issue 15): history of what was processed.
-- Executed by the alembic revision 0005 (migrations/versions/), before its functions.
--
-- pgqueue.job_stats: per-minute aggregates per queue and job name, written by the stored
-- functions that already run with each outcome (ack, release, fail, cancel, and reserve's
-- doomed path), so recording history costs no extra round trip. Concurrent writers of the
-- same minute are spread over a few rows (shard = the writing backend's pid modulo 8) so
-- that many workers acking at once do not queue up on one hot row: read with sum() over the
-- shards (group by minute, queue, name). Pruned in batches by the workers' maintenance after
-- its retention (default 7 days).
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
    primary key (minute, queue, name, shard)
);

comment on table pgqueue.job_stats is
    'pgqueue: per-minute outcome counts, handler durations and queue latencies per queue and job name (sum over shard).';

-- The time the current attempt became due (its available_at when it was reserved): the start of
-- its queue latency. Written by pgqueue.reserve; null for jobs reserved before revision 0005.
alter table pgqueue.jobs add column due_at timestamptz;

-- pgqueue.completed_jobs: with keep_completed on, a copy of each acked job (written by the
-- same statement as the ack), kept for audit until the workers' maintenance prunes it.
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
