-- pgqueue.clear(queue) -> number of jobs removed
-- Removes every ready, delayed and reserved job of a queue. Handlers still running jobs of
-- that queue lose their leases: their acks will be refused. A name the queue-name rule
-- refuses (pgqueue.queue_name_problem; the empty name among them) is refused with SQLSTATE
-- 22023: no job can be on such a queue, and a typo should say so rather than remove nothing.
-- Issue 26: a removed job with dependents ends as cancelled for them (pgqueue.jobs_ended): its
-- children follow their policy, its batch counts it.
-- From psql:  select pgqueue.clear('reports');
create or replace function pgqueue.clear(p_queue text)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
    v_count bigint;
    v_ended uuid[];
begin
    if v_problem is not null then
        raise exception 'pgqueue.clear: %; nothing was removed', v_problem using errcode = '22023';
    end if;
    with gone as (delete from pgqueue.jobs j where j.queue = p_queue returning j.id, j.has_dependents)
    select count(*), array_agg(g.id) filter (where g.has_dependents) into v_count, v_ended from gone g;
    if v_ended is not null then
        perform pgqueue.jobs_ended(v_ended, 'cancelled');
    end if;
    return v_count;
end
$$;

comment on function pgqueue.clear(text) is 'pgqueue: remove all ready, delayed and reserved jobs of a queue.';
