-- issue 27: pgqueue.prune_workflows(batch) -> workflows whose rows were deleted
-- The workers' maintenance: deletes the checkpoints and signals of at most p_batch workflows that
-- are gone: no live job, no kept result (its result_ttl passed, or it kept none), no failure
-- record (a failed or cancelled workflow keeps its steps while its failure is kept, so that
-- retry_failed resumes it where it stopped). Call again while the count equals p_batch.
-- From psql:  select pgqueue.prune_workflows(10000);
create or replace function pgqueue.prune_workflows(p_batch integer)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_gone uuid[];
begin
    select array_agg(g.job_id) into v_gone
    from (select distinct s.job_id from pgqueue.workflow_steps s
          where not exists (select 1 from pgqueue.jobs j where j.id = s.job_id)
            and not exists (select 1 from pgqueue.job_results r where r.job_id = s.job_id)
            and not exists (select 1 from pgqueue.failed_jobs f where f.job_id = s.job_id)
          limit p_batch) g;
    if v_gone is null then
        return 0;
    end if;
    delete from pgqueue.workflow_steps s where s.job_id = any (v_gone);
    delete from pgqueue.workflow_signals g where g.job_id = any (v_gone);
    return cardinality(v_gone);
end
$$;

comment on function pgqueue.prune_workflows(integer) is
    'pgqueue: delete the checkpoints and signals of workflows that are gone (issue 27).';
