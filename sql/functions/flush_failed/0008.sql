-- pgqueue.flush_failed(queue, older_than) -> number of failure records deleted
-- Deletes failure records of one queue (or all when p_queue is null), optionally only
-- those older than p_older_than. A queue name the queue-name rule refuses
-- (pgqueue.queue_name_problem; the empty name among them) is refused with SQLSTATE 22023.
-- From psql:  select pgqueue.flush_failed(null, interval '24 hours');
create or replace function pgqueue.flush_failed(p_queue text default null, p_older_than interval default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := case when p_queue is not null then pgqueue.queue_name_problem(p_queue) end;
    v_count bigint;
begin
    if v_problem is not null then
        raise exception 'pgqueue.flush_failed: %; nothing was deleted', v_problem using errcode = '22023';
    end if;
    with gone as (
        delete from pgqueue.failed_jobs f
        where (p_queue is null or f.queue = p_queue)
          and (p_older_than is null or f.failed_at < now() - p_older_than)
        returning 1
    )
    select count(*) into v_count from gone;
    return v_count;
end
$$;

comment on function pgqueue.flush_failed(text, interval) is
    'pgqueue: delete failure records of a queue (or all), optionally only those older than an interval.';
