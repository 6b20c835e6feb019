-- pgqueue.register_worker(id, host, pid, queues, concurrency, prefetch, version, stale_after) -> void
-- A worker says who it is when it starts (issue 29): a row of pgqueue.workers, kept fresh by
-- pgqueue.refresh_worker from the worker's heartbeat and deleted by pgqueue.deregister_worker on a
-- clean stop. A row not refreshed for stale_after seconds is a worker that is gone (killed, or cut
-- off from the database); rows gone for a day are deleted here, by the next worker that starts.
-- From psql:  select * from pgqueue.workers;
create or replace function pgqueue.register_worker(p_id uuid, p_host text, p_pid integer, p_queues text[],
                                                   p_concurrency integer, p_prefetch integer, p_version text,
                                                   p_stale_after double precision)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if p_id is null or p_host is null or p_pid is null or p_version is null then
        raise exception 'pgqueue.register_worker: id, host, pid and version are required (got %, %, %, %)',
            p_id, p_host, p_pid, p_version using errcode = '22023';
    end if;
    if p_queues is null or cardinality(p_queues) = 0 then
        raise exception 'pgqueue.register_worker: a worker serves at least one queue (got %)', p_queues
            using errcode = '22023';
    end if;
    if p_concurrency is null or p_concurrency < 1 or p_prefetch is null or p_prefetch < 0 then
        raise exception 'pgqueue.register_worker: concurrency must be >= 1 and prefetch >= 0 (got %, %)',
            p_concurrency, p_prefetch using errcode = '22023';
    end if;
    if p_stale_after is null or not p_stale_after > 0 or p_stale_after = 'infinity' then
        raise exception 'pgqueue.register_worker: stale_after must be a positive number of seconds (got %)',
            p_stale_after using errcode = '22023';
    end if;
    delete from pgqueue.workers w
    where w.heartbeat_at < now() - make_interval(secs => w.stale_after) - interval '1 day';
    insert into pgqueue.workers as w (id, host, pid, queues, concurrency, prefetch, version, stale_after)
    values (p_id, p_host, p_pid, p_queues, p_concurrency, p_prefetch, p_version, p_stale_after)
    on conflict (id) do update
        set host = excluded.host, pid = excluded.pid, queues = excluded.queues,
            concurrency = excluded.concurrency, prefetch = excluded.prefetch, version = excluded.version,
            stale_after = excluded.stale_after, heartbeat_at = now();
end
$$;

comment on function pgqueue.register_worker(uuid, text, integer, text[], integer, integer, text, double precision) is
    'pgqueue: a starting worker registers itself in pgqueue.workers.';
