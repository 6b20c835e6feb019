-- pgqueue.retry_failed(failure_id) -> job id
-- Puts a failed job back on its original queue with its original envelope and job id,
-- attempts reset to 0 and ready now, and removes the failure record in the same
-- transaction. Refuses with SQLSTATE PGQ01 when the job's retry_until deadline has passed,
-- with P0002 when there is no such failure, and with PGQ02 when the job id is live again.
-- Revision 0010 (issue 26): what waited for the job follows (pgqueue.jobs_requeued): a batch
-- member is pending in its batch again, a job with parents waits for those still open, and the
-- dependents it had cancelled (dependency_failed) come back waiting for it, transitively.
-- From psql:  select pgqueue.retry_failed('<failure id>');
create or replace function pgqueue.retry_failed(p_failure_id uuid)
returns uuid
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_failure pgqueue.failed_jobs;
    v_retry_until timestamptz;
begin
    select * into v_failure from pgqueue.failed_jobs f where f.id = p_failure_id for update;
    if not found then
        raise exception 'pgqueue.retry_failed: no failed job with failure id %', p_failure_id
            using errcode = 'P0002',
                  hint = 'list failures with: select id, job_id, queue, reason, failed_at from pgqueue.failed_jobs order by failed_at desc';
    end if;
    v_retry_until := to_timestamp((v_failure.envelope->>'retry_until')::double precision);
    if v_retry_until < clock_timestamp() then
        raise exception 'pgqueue.retry_failed: job % (failure %) had a deadline of %, which has passed; it will not be retried',
                        v_failure.job_id, p_failure_id, v_retry_until
            using errcode = 'PGQ01',
                  hint = 'dispatch a new job instead, or forget this failure with pgqueue.forget_failed()';
    end if;
    if exists (select 1 from pgqueue.jobs j where j.id = v_failure.job_id) then
        raise exception 'pgqueue.retry_failed: job % is already queued again; failure % was left as it is',
                        v_failure.job_id, p_failure_id
            using errcode = 'PGQ02';
    end if;
    insert into pgqueue.jobs (id, queue, priority, envelope, attempts, max_tries, retry_until, available_at, partition)
    values (v_failure.job_id, v_failure.queue, coalesce((v_failure.envelope->>'priority')::smallint, 0),
            v_failure.envelope, 0, greatest(coalesce((v_failure.envelope->>'tries')::integer, 1), 1),
            v_retry_until, clock_timestamp(), v_failure.partition);  -- issue 28: back in its partition
    delete from pgqueue.failed_jobs f where f.id = p_failure_id;
    perform pgqueue.jobs_requeued(array[v_failure.job_id]);  -- issue 26: batches and dependents
    perform pg_notify('pgqueue', v_failure.queue);
    return v_failure.job_id;
end
$$;

comment on function pgqueue.retry_failed(uuid) is
    'pgqueue: re-enqueue a failed job (same job id and envelope, attempts reset) and remove its failure record; its batch and dependents follow.';
