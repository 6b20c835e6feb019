-- pgqueue.clear(queue) -> number of jobs removed
-- Removes every ready, delayed and reserved job of a queue. Handlers still running jobs of
-- that queue lose their leases: their acks will be refused.
-- From psql:  select pgqueue.clear('reports');
create or replace function pgqueue.clear(p_queue text)
returns bigint
language sql
set search_path = pg_catalog, pg_temp
as $$
    with gone as (delete from pgqueue.jobs j where j.queue = p_queue returning 1)
    select count(*) from gone
$$;

comment on function pgqueue.clear(text) is 'pgqueue: remove all ready, delayed and reserved jobs of a queue.';
