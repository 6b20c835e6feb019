-- pgqueue.deregister_worker(id) -> true if the worker's row was deleted, false if it had none
-- A worker that stops cleanly removes its row of pgqueue.workers; one that dies leaves it, and its
-- row is shown as gone once it is stale_after seconds old.
create or replace function pgqueue.deregister_worker(p_id uuid)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from pgqueue.workers w where w.id = p_id;
    return found;
end
$$;

comment on function pgqueue.deregister_worker(uuid) is
    'pgqueue: a worker that stops cleanly removes itself from pgqueue.workers.';
