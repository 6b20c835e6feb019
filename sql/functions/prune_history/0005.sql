-- pgqueue.prune_history(stats_retention_seconds, completed_retention_seconds, batch) -> rows deleted
-- Deletes at most p_batch rows of pgqueue.job_stats older than p_stats_retention_seconds and at
-- most p_batch rows of pgqueue.completed_jobs finished longer ago than
-- p_completed_retention_seconds (null: keep them all). Rows another session is deleting are
-- skipped (SKIP LOCKED), so concurrent workers never wait on each other; call again while a
-- count equals p_batch. Small batches keep each transaction short and its locks few.
-- From psql:  select * from pgqueue.prune_history(7 * 86400, 86400, 10000);
create or replace function pgqueue.prune_history(p_stats_retention_seconds double precision,
                                                 p_completed_retention_seconds double precision,
                                                 p_batch integer)
returns table (stats_deleted integer, completed_deleted integer)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_stats integer := 0;
    v_completed integer := 0;
begin
    if p_batch is null or p_batch < 1 then
        raise exception 'pgqueue.prune_history: batch must be >= 1, got %', p_batch using errcode = '22023';
    end if;
    if p_stats_retention_seconds is null or not (p_stats_retention_seconds >= 0 and p_stats_retention_seconds <= 3153600000)
       or p_completed_retention_seconds is not null
          and not (p_completed_retention_seconds >= 0 and p_completed_retention_seconds <= 3153600000) then
        raise exception 'pgqueue.prune_history: retentions must be finite numbers of seconds from 0 to 3153600000 (100 years), got % and %',
                        p_stats_retention_seconds, p_completed_retention_seconds
            using errcode = '22023';
    end if;
    delete from pgqueue.job_stats s
    where s.ctid = any (array(
        select o.ctid from pgqueue.job_stats o
        where o.minute < now() - make_interval(secs => p_stats_retention_seconds)
        order by o.minute
        limit p_batch
        for update skip locked));
    get diagnostics v_stats = row_count;
    if p_completed_retention_seconds is not null then
        delete from pgqueue.completed_jobs c
        where c.ctid = any (array(
            select o.ctid from pgqueue.completed_jobs o
            where o.finished_at < now() - make_interval(secs => p_completed_retention_seconds)
            order by o.finished_at
            limit p_batch
            for update skip locked));
        get diagnostics v_completed = row_count;
    end if;
    return query select v_stats, v_completed;
end
$$;

comment on function pgqueue.prune_history(double precision, double precision, integer) is
    'pgqueue: delete a batch of job_stats and completed_jobs rows older than their retentions (workers'' maintenance).';
