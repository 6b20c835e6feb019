-- pgqueue.failure_recorded() -> trigger (after insert on pgqueue.failed_jobs, per row)
-- A job's terminal failure, whoever recorded it (pgqueue.fail, pgqueue.cancel, the reservation's
-- doomed path, pgqueue.record_failure): it becomes the last attempt of the job's history
-- (pgqueue.attempt_failures, which retry_failed leaves as it is) and wakes whoever awaits the
-- job (channel pgqueue_ended, payload: the job id). Runs on the failure path only, never on an ack.
create or replace function pgqueue.failure_recorded()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    insert into pgqueue.attempt_failures (job_id, attempt, failed_at, reason, exception, message, traceback, worker,
                                          duration)
    values (new.job_id, new.attempts, new.failed_at, new.reason, new.exception, new.message, new.traceback, new.worker,
            new.duration);
    perform pg_notify('pgqueue_ended', new.job_id::text);
    return null;
end
$$;

comment on function pgqueue.failure_recorded() is
    'pgqueue: trigger on failed_jobs: the failure joins the job''s attempt history and notifies pgqueue_ended.';
