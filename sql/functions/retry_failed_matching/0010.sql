-- pgqueue.retry_failed_matching(queue, name, reason, since, until, batch) -> jobs put back
-- Retries (pgqueue.retry_failed) at most p_batch failures matching the dashboard's filters of
-- failed jobs (queue, job name, reason, failed_at range; null: any) that may be retried: within
-- their deadline, their job not live again, their queue name allowed (as pgqueue.retry_failed_all
-- picks them). Newest failure first. One bounded batch per call (see pgqueue.cancel_matching).
-- Revision 0010 (issues 26, 27): a retry may put back other matching jobs with it (a parent's
-- dependents cancelled with it, a workflow's child): a failure already retried so is skipped (not
-- counted), instead of failing the batch with P0002.
create or replace function pgqueue.retry_failed_matching(p_queue text, p_name text, p_reason text,
                                                         p_since timestamptz, p_until timestamptz, p_batch integer)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count integer := 0;
    v_id uuid;
begin
    if p_batch is null or p_batch < 1 or p_batch > 10000 then
        raise exception 'pgqueue.retry_failed_matching: batch must be from 1 to 10000 (got %)', p_batch
            using errcode = '22023';
    end if;
    for v_id in
        select distinct on (f.job_id) f.id from pgqueue.failed_jobs f
        where (p_queue is null or f.queue = p_queue)
          and (p_name is null or f.envelope->>'name' = p_name)
          and (p_reason is null or f.reason = p_reason)
          and (p_since is null or f.failed_at >= p_since)
          and (p_until is null or f.failed_at < p_until)
          and (f.envelope->>'retry_until' is null
               or to_timestamp((f.envelope->>'retry_until')::double precision) >= clock_timestamp())
          and not exists (select 1 from pgqueue.jobs j where j.id = f.job_id)
          and pgqueue.queue_name_problem(f.queue) is null
        order by f.job_id, f.failed_at desc, f.id
        limit p_batch
    loop
        -- issue 27: put back already by an earlier retry of this batch (its failure record is gone)
        continue when not exists (select 1 from pgqueue.failed_jobs f where f.id = v_id);
        perform pgqueue.retry_failed(v_id);
        v_count := v_count + 1;
    end loop;
    return v_count;
end
$$;

comment on function pgqueue.retry_failed_matching(text, text, text, timestamptz, timestamptz, integer) is
    'pgqueue: retry one bounded batch of the failures matching the dashboard''s filters.';
