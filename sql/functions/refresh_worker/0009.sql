-- pgqueue.refresh_worker(id, held) -> true if the worker's row was refreshed, false if it has none
-- Called by the worker's heartbeat every period: the row's heartbeat_at becomes now() and held the
-- jobs it holds (running or prefetched) at that moment. False: the row was deleted (by an operator,
-- or pruned after the worker was gone for a day); the worker then registers again.
create or replace function pgqueue.refresh_worker(p_id uuid, p_held uuid[])
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    update pgqueue.workers w set heartbeat_at = now(), held = coalesce(p_held, '{}')
    where w.id = p_id;
    return found;
end
$$;

comment on function pgqueue.refresh_worker(uuid, uuid[]) is
    'pgqueue: the heartbeat of a registered worker (pgqueue.workers.heartbeat_at, held).';
