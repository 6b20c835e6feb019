-- pgqueue.prune_results(attempts_retention_seconds, batch) -> rows deleted
-- The workers' maintenance: deletes at most p_batch results past their expiry (result_ttl) and at
-- most p_batch failed attempts older than p_attempts_retention_seconds whose job is gone (no live
-- job, no failure record, no kept result); SKIP LOCKED, so concurrent workers never wait on each
-- other. Call again while a count equals p_batch.
-- Issue 26 §2 (links_deleted): at most p_batch rows of pgqueue.dependent_jobs older than the
-- retention whose job is gone, and at most p_batch batches finished before the retention whose
-- callback is gone, with their members.
-- From psql:  select * from pgqueue.prune_results(7 * 86400, 10000);
create or replace function pgqueue.prune_results(p_attempts_retention_seconds double precision, p_batch integer)
returns table (results_deleted integer, attempts_deleted integer, links_deleted integer)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_results integer := 0;
    v_attempts integer := 0;
    v_links integer := 0;
    v_batches integer := 0;
begin
    if p_batch is null or p_batch < 1 then
        raise exception 'pgqueue.prune_results: batch must be >= 1, got %', p_batch using errcode = '22023';
    end if;
    if p_attempts_retention_seconds is null
       or not (p_attempts_retention_seconds >= 0 and p_attempts_retention_seconds <= 3153600000) then
        raise exception 'pgqueue.prune_results: the retention must be a finite number of seconds from 0 to 3153600000 (100 years), got %',
                        p_attempts_retention_seconds
            using errcode = '22023';
    end if;
    delete from pgqueue.job_results r
    where r.job_id = any (array(
        select o.job_id from pgqueue.job_results o
        where o.expires_at < now()
        order by o.expires_at
        limit p_batch
        for update skip locked));
    get diagnostics v_results = row_count;
    delete from pgqueue.attempt_failures a
    where a.ctid = any (array(
        select o.ctid from pgqueue.attempt_failures o
        where o.failed_at < now() - make_interval(secs => p_attempts_retention_seconds)
          and not exists (select 1 from pgqueue.jobs j where j.id = o.job_id)
          and not exists (select 1 from pgqueue.failed_jobs f where f.job_id = o.job_id)
          and not exists (select 1 from pgqueue.job_results r where r.job_id = o.job_id)
        order by o.failed_at
        limit p_batch
        for update skip locked));
    get diagnostics v_attempts = row_count;
    delete from pgqueue.dependent_jobs w
    where w.job_id = any (array(
        select o.job_id from pgqueue.dependent_jobs o
        where o.created_at < now() - make_interval(secs => p_attempts_retention_seconds)
          and not exists (select 1 from pgqueue.jobs j where j.id = o.job_id)
        order by o.created_at
        limit p_batch
        for update skip locked));
    get diagnostics v_links = row_count;
    with gone as (
        delete from pgqueue.batches b
        where b.id = any (array(
            select o.id from pgqueue.batches o
            where o.finished_at < now() - make_interval(secs => p_attempts_retention_seconds)
              and not exists (select 1 from pgqueue.jobs j where j.id = o.callback_id)
            order by o.finished_at
            limit p_batch
            for update skip locked))
        returning b.id
    ),
    members as (
        delete from pgqueue.batch_members m using gone g where m.batch_id = g.id
    )
    select count(*) into v_batches from gone;
    return query select v_results, v_attempts, v_links + v_batches;
end
$$;

comment on function pgqueue.prune_results(double precision, integer) is
    'pgqueue: delete expired results, the failed attempts and the dependency and batch rows of jobs that are gone, in batches.';
