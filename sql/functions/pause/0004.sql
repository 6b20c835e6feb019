-- pgqueue.pause(queue) -> true if the queue was running, false if it was already paused
-- No worker reserves from a paused queue (pgqueue.reserve checks it), on any host, from the
-- next reservation on; running jobs finish. Dispatch is still accepted and delayed jobs fall
-- due, then wait. Stored in pgqueue.queues, so it outlives every worker.
-- From psql:  select pgqueue.pause('reports');
create or replace function pgqueue.pause(p_queue text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
    v_was boolean;
begin
    if v_problem is not null then
        raise exception 'pgqueue.pause: %', v_problem using errcode = '22023';
    end if;
    select q.paused into v_was from pgqueue.queues q where q.name = p_queue for update;
    insert into pgqueue.queues as q (name, paused) values (p_queue, true)
    on conflict (name) do update set paused = true, updated_at = now();
    return not coalesce(v_was, false);
end
$$;

comment on function pgqueue.pause(text) is 'pgqueue: stop every worker reserving from a queue.';
