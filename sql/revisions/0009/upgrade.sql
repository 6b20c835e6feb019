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
