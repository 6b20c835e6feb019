-- pgqueue.delete_matching(ids, queue, name, args, state, since, until, batch) -> jobs deleted
-- Deletes at most p_batch waiting jobs (ready or delayed: never one a worker holds, which is
-- cancelled instead) that match the search (pgqueue.jobs_matching) and, when p_ids is not null,
-- are among those ids; oldest dispatch first. Unlike a cancel, nothing is recorded in failed_jobs:
-- the jobs are gone (as with pgqueue.clear). One bounded batch per call (see pgqueue.cancel_matching).
create or replace function pgqueue.delete_matching(p_ids uuid[], p_queue text, p_name text, p_args jsonb,
                                                   p_state text, p_since timestamptz, p_until timestamptz,
                                                   p_batch integer)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count integer;
    v_ended uuid[];
begin
    if p_batch is null or p_batch < 1 or p_batch > 10000 then
        raise exception 'pgqueue.delete_matching: batch must be from 1 to 10000 (got %)', p_batch
            using errcode = '22023';
    end if;
    with picked as (
        select j.id from pgqueue.jobs j
        where j.token is null
          and (p_ids is null or j.id = any(p_ids))
          and pgqueue.jobs_matching(j, p_queue, p_name, p_args, p_state, p_since, p_until)
        order by j.id
        limit p_batch
        for update skip locked
    )
    , gone as (
        delete from pgqueue.jobs j using picked p where j.id = p.id returning j.id, j.has_dependents
    )
    select count(*), array_agg(g.id) filter (where g.has_dependents) into v_count, v_ended from gone g;
    -- Issue 26: a deleted job with dependents ends as cancelled for them (pgqueue.jobs_ended).
    if v_ended is not null then
        perform pgqueue.jobs_ended(v_ended, 'cancelled');
    end if;
    return v_count;
end
$$;

comment on function pgqueue.delete_matching(uuid[], text, text, jsonb, text, timestamptz, timestamptz, integer) is
    'pgqueue: delete one bounded batch of the waiting jobs matching a search (or of the given ids).';
