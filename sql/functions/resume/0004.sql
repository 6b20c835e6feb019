-- pgqueue.resume(queue) -> true if the queue was paused, false if it was not
-- Workers reserve from the queue again; idle ones are woken at once (channel pgqueue).
-- From psql:  select pgqueue.resume('reports');
create or replace function pgqueue.resume(p_queue text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    update pgqueue.queues q set paused = false, updated_at = now()
    where q.name = p_queue and q.paused;
    if not found then
        return false;
    end if;
    perform pg_notify('pgqueue', p_queue);
    return true;
end
$$;

comment on function pgqueue.resume(text) is 'pgqueue: let workers reserve from a paused queue again.';
