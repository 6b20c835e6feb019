-- pgqueue.retry_failed_all(queue) -> number of jobs put back
-- Retries every failure (of one queue, or all when p_queue is null) whose deadline allows
-- it; failures past their deadline, whose job id is live again, or whose queue name the
-- queue-name rule (pgqueue.queue_name_problem) now refuses (recorded before revision 0008
-- tightened it; no job may be on such a queue), are left in place. A p_queue the rule refuses
-- (the empty name among them) is refused with SQLSTATE 22023. Revision 0010 (issue 26): the
-- batches and dependents of the jobs put back follow, as for pgqueue.retry_failed
-- (pgqueue.jobs_requeued).
-- From psql:  select pgqueue.retry_failed_all('emails');
create or replace function pgqueue.retry_failed_all(p_queue text default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := case when p_queue is not null then pgqueue.queue_name_problem(p_queue) end;
    v_count bigint;
    v_queues text[];
    v_ids uuid[];
begin
    if v_problem is not null then
        raise exception 'pgqueue.retry_failed_all: %; nothing was retried', v_problem using errcode = '22023';
    end if;
    with picked as (
        select f.id, f.job_id, f.queue, f.envelope, f.failed_at,
               to_timestamp((f.envelope->>'retry_until')::double precision) as retry_until
        from pgqueue.failed_jobs f
        where (p_queue is null or f.queue = p_queue)
          and (f.envelope->>'retry_until' is null
               or to_timestamp((f.envelope->>'retry_until')::double precision) >= clock_timestamp())
          and not exists (select 1 from pgqueue.jobs j where j.id = f.job_id)
          and pgqueue.queue_name_problem(f.queue) is null
        for update of f skip locked
    ), latest as (
        -- a job id may have failed more than once (retried, failed again, record kept):
        -- put it back once, from its most recent failure; the older records stay.
        select distinct on (p.job_id) p.* from picked p order by p.job_id, p.failed_at desc, p.id
    ), back as (
        insert into pgqueue.jobs (id, queue, priority, envelope, attempts, max_tries, retry_until, available_at,
                                  partition)
        select l.job_id, l.queue, coalesce((l.envelope->>'priority')::smallint, 0), l.envelope, 0,
               greatest(coalesce((l.envelope->>'tries')::integer, 1), 1), l.retry_until, clock_timestamp(),
               l.envelope->>'partition'  -- issue 28: back in its partition
        from latest l
        returning pgqueue.jobs.id, pgqueue.jobs.queue
    ), gone as (
        delete from pgqueue.failed_jobs f using latest l where f.id = l.id returning f.id
    )
    select count(*), coalesce(array_agg(distinct b.queue), '{}'), array_agg(b.id) into v_count, v_queues, v_ids
    from back b;
    perform pgqueue.jobs_requeued(v_ids);  -- issue 26: batches and dependents
    perform pg_notify('pgqueue', q) from unnest(v_queues) as q;
    return v_count;
end
$$;

comment on function pgqueue.retry_failed_all(text) is
    'pgqueue: retry every failure of a queue (or all queues) that is still within its deadline.';
