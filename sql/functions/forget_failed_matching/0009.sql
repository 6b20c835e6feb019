-- pgqueue.forget_failed_matching(queue, name, reason, since, until, batch) -> failures forgotten
-- Deletes at most p_batch failure records matching the dashboard's filters of failed jobs
-- (queue, job name, reason, failed_at range; null: any), oldest first. One bounded batch per call
-- (see pgqueue.cancel_matching).
create or replace function pgqueue.forget_failed_matching(p_queue text, p_name text, p_reason text,
                                                          p_since timestamptz, p_until timestamptz, p_batch integer)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count integer;
begin
    if p_batch is null or p_batch < 1 or p_batch > 10000 then
        raise exception 'pgqueue.forget_failed_matching: batch must be from 1 to 10000 (got %)', p_batch
            using errcode = '22023';
    end if;
    with picked as (
        select f.id from pgqueue.failed_jobs f
        where (p_queue is null or f.queue = p_queue)
          and (p_name is null or f.envelope->>'name' = p_name)
          and (p_reason is null or f.reason = p_reason)
          and (p_since is null or f.failed_at >= p_since)
          and (p_until is null or f.failed_at < p_until)
        order by f.failed_at, f.id
        limit p_batch
        for update skip locked
    )
    delete from pgqueue.failed_jobs f using picked p where f.id = p.id;
    get diagnostics v_count = row_count;
    return v_count;
end
$$;

comment on function pgqueue.forget_failed_matching(text, text, text, timestamptz, timestamptz, integer) is
    'pgqueue: delete one bounded batch of the failure records matching the dashboard''s filters.';
