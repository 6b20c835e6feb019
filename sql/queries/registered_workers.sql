-- The registered workers (pgqueue.workers), longest running first, each with whether it is gone
-- (no heartbeat for stale_after seconds) and the jobs it held at its last heartbeat that are still
-- reserved (name, queue, attempt, and how long since they were reserved). Bounded by the workers'
-- rows and, per worker, by what it holds (at most its concurrency + prefetch jobs, by primary key).
select w.id, w.host, w.pid, w.queues, w.concurrency, w.prefetch, w.version, w.started_at, w.heartbeat_at,
       extract(epoch from now() - w.started_at)::double precision   as up_seconds,
       extract(epoch from now() - w.heartbeat_at)::double precision as silent_seconds,
       w.heartbeat_at < now() - make_interval(secs => w.stale_after) as gone,
       coalesce(h.jobs, '[]'::jsonb)                                 as jobs
from pgqueue.workers w
left join lateral (
    select jsonb_agg(jsonb_build_object(
               'id', j.id, 'queue', j.queue, 'name', j.envelope->>'name', 'attempts', j.attempts,
               'seconds', extract(epoch from now() - j.reserved_at)::double precision)
           order by j.reserved_at) as jobs
    from pgqueue.jobs j
    where j.id = any(w.held) and j.token is not null
) h on true
order by w.started_at, w.id
