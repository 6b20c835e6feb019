-- pgqueue.failure_recorded() -> trigger (after insert on pgqueue.failed_jobs, per row)
-- A job's terminal failure, whoever recorded it (pgqueue.fail, pgqueue.cancel, the reservation's
-- doomed path, pgqueue.record_failure): it becomes the last attempt of the job's history
-- (pgqueue.attempt_failures, which retry_failed leaves as it is) and wakes whoever awaits the
-- job (channel pgqueue_ended, payload: the job id). Runs on the failure path only, never on an ack.
-- Issue 26: if jobs wait for it or a batch counts it, pgqueue.jobs_ended applies their policy in
-- the same statement (a child cancelled with reason dependency_failed fires this trigger in turn:
-- the cancellation is transitive). Two index probes of small tables per failure. A failed job's
-- own waits (as a child) are left to its parents' ends, which find it gone: deleting them here
-- would take the locks of a concurrent parent's end in the other order (a deadlock).
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
    if exists (select 1 from pgqueue.job_dependencies d where d.parent_id = new.job_id)
       or exists (select 1 from pgqueue.batch_members m where m.job_id = new.job_id and m.outcome is null) then
        perform pgqueue.jobs_ended(array[new.job_id],
                                   case when new.reason in ('cancelled', 'dependency_failed') then 'cancelled'
                                        else 'failed' end);
    end if;
    return null;
end
$$;

comment on function pgqueue.failure_recorded() is
    'pgqueue: trigger on failed_jobs: the failure joins the job''s attempt history and notifies pgqueue_ended.';
