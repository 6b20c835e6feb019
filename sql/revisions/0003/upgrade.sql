-- pgqueue schema, revision 0003 (issue 13): unique jobs, periodic jobs (schedules and their
-- ticks) and snooze. Executed by the alembic revision 0003 (migrations/versions/), before its
-- functions.

-- Unique jobs. A job dispatched with a unique key in a state scope carries the key in its row:
--   'queued': at most one job per key that is waiting (ready or delayed, token is null);
--   'active': at most one job per key that is queued or running (the row exists at all).
-- The two partial unique indexes are the whole enforcement: pgqueue.enqueue_unique inserts
-- with ON CONFLICT DO NOTHING, so concurrent producers of one key give exactly one row, and a
-- second transaction waits on the index entry of an uncommitted first one (then sees it, or
-- inserts if the first rolled back). Jobs without a key (unique_key null) are in neither index.
alter table pgqueue.jobs
    add column unique_key text,
    add column unique_scope text,
    -- Times the job was snoozed (pgqueue.snooze): re-run later without using up a try.
    add column snoozes integer not null default 0,
    add constraint jobs_unique_scope check (
        (unique_scope is null and unique_key is null)
        or (unique_scope in ('queued', 'active') and unique_key is not null
            and length(unique_key) between 1 and 1000)),
    add constraint jobs_snoozes_non_negative check (snoozes >= 0);

create unique index jobs_unique_queued_idx on pgqueue.jobs (unique_key)
    where unique_scope = 'queued' and token is null;
create unique index jobs_unique_active_idx on pgqueue.jobs (unique_key)
    where unique_scope = 'active';

-- A 'queued' job that goes back to waiting (release, snooze, release_unstarted) while another
-- job of its key was dispatched during its run drops its key instead of failing the update:
-- both then run, and the newer one keeps the key. The WHEN clause is evaluated without calling
-- the function, so jobs without a key pay nothing.
create trigger jobs_unique_requeue
    before update of token on pgqueue.jobs
    for each row
    when (new.unique_scope = 'queued' and new.token is null and old.token is not null)
    execute function pgqueue.unique_requeue();

-- Unique for a period after dispatch, even once the job has finished (and been deleted):
-- one row per key, taken over by the next dispatch only after it expired.
create table pgqueue.unique_keys (
    key         text        primary key,
    job_id      uuid        not null,
    expires_at  timestamptz not null,
    constraint unique_keys_key_length check (length(key) between 1 and 1000)
);

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
    constraint schedules_catch_up_positive check (catch_up >= 1)
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
