-- pgqueue.cancel_matching(ids, queue, name, args, state, since, until, batch) -> jobs cancelled
-- Cancels (pgqueue.cancel: ready, delayed and running jobs, each recorded in failed_jobs with
-- reason 'cancelled') at most p_batch jobs that match the search (pgqueue.jobs_matching) and, when
-- p_ids is not null, are among those ids; oldest dispatch first. One bounded batch per call, so a
-- caller cancelling "all matching" calls it until it returns less than p_batch, each call a short
-- transaction of its own. Rows locked by another transaction are skipped (the next call sees them).
-- From psql:  select pgqueue.cancel_matching(null, 'emails', null, '{"to": "a@example.com"}', null, null, null, 500);
create or replace function pgqueue.cancel_matching(p_ids uuid[], p_queue text, p_name text, p_args jsonb,
                                                   p_state text, p_since timestamptz, p_until timestamptz,
                                                   p_batch integer)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count integer := 0;
    v_id uuid;
begin
    if p_batch is null or p_batch < 1 or p_batch > 10000 then
        raise exception 'pgqueue.cancel_matching: batch must be from 1 to 10000 (got %)', p_batch
            using errcode = '22023';
    end if;
    for v_id in
        select j.id from pgqueue.jobs j
        where (p_ids is null or j.id = any(p_ids))
          and pgqueue.jobs_matching(j, p_queue, p_name, p_args, p_state, p_since, p_until)
        order by j.id
        limit p_batch
        for update skip locked
    loop
        if pgqueue.cancel(v_id) in ('cancelled', 'cancelled_running') then
            v_count := v_count + 1;
        end if;
    end loop;
    return v_count;
end
$$;

comment on function pgqueue.cancel_matching(uuid[], text, text, jsonb, text, timestamptz, timestamptz, integer) is
    'pgqueue: cancel one bounded batch of the jobs matching a search (or of the given ids).';
