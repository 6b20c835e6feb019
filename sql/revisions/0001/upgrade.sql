-- pgqueue schema, revision 0001: tables, sequence, indexes and the stats view.
-- Executed by the alembic revision 0001 (migrations/versions/); the stored functions
-- live one per file in sql/functions/ and are installed by the same revision.

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
    constraint jobs_queue_name check (length(queue) between 1 and 200),
    constraint jobs_max_tries_positive check (max_tries >= 1),
    constraint jobs_attempts_non_negative check (attempts >= 0)
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
    autovacuum_vacuum_cost_delay = 0
);

-- The one index the reservation needs: per queue and priority, ready jobs and expired
-- leases come first in available_at order; delayed jobs and live leases sort after them
-- and are never visited by a reservation. next_due() reads the same index.
create index jobs_reservation_idx on pgqueue.jobs (queue, priority, available_at);

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
    constraint failed_jobs_reason check (reason in (
        'exception', 'attempts_exhausted', 'deadline_passed',
        'lease_expired_after_final_attempt', 'payload_invalid', 'unknown_job', 'failed_by_handler'))
);

create index failed_jobs_failed_at_idx on pgqueue.failed_jobs (failed_at desc);
create index failed_jobs_queue_failed_at_idx on pgqueue.failed_jobs (queue, failed_at desc);
create index failed_jobs_job_id_idx on pgqueue.failed_jobs (job_id);

comment on table pgqueue.jobs is
    'pgqueue: ready, delayed and reserved jobs. Change rows only through the pgqueue.* functions.';
comment on table pgqueue.failed_jobs is
    'pgqueue: terminal failures. May hold business data from job args and tracebacks: restrict access.';

-- Per-queue counts for operators: select * from pgqueue.queue_stats;
create view pgqueue.queue_stats as
with live as (
    select queue,
           count(*) filter (where token is null and available_at <= now())       as ready,
           count(*) filter (where token is null and available_at > now())        as delayed,
           count(*) filter (where token is not null and available_at > now())    as reserved,
           count(*) filter (where token is not null and available_at <= now())   as expired,
           max(now() - available_at) filter (where token is null and available_at <= now())
                                                                                 as oldest_ready_age
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
       live.oldest_ready_age                 as oldest_ready_age
from live full join dead on dead.queue = live.queue;

comment on view pgqueue.queue_stats is
    'pgqueue: per queue, ready / delayed / reserved / expired-lease / failed counts and the age of the oldest ready job.';
