-- pgqueue revision 0004, downgrade to 0003: undoes 0004_schema.sql and drops the functions
-- 0004 added; the migration then runs 0002's frozen reserve and next_due again (0003 did not
-- replace them).
-- Cancellation records are kept as failures of reason 'failed_by_handler'.
drop function pgqueue.cancel(uuid);
drop function pgqueue.pause(text);
drop function pgqueue.resume(text);
drop function pgqueue.set_limits(text, integer, integer, double precision);
drop table pgqueue.queues;
alter table pgqueue.failed_jobs drop constraint failed_jobs_reason;
update pgqueue.failed_jobs set reason = 'failed_by_handler' where reason = 'cancelled';
alter table pgqueue.failed_jobs add constraint failed_jobs_reason check (reason in (
    'exception', 'attempts_exhausted', 'deadline_passed',
    'lease_expired_after_final_attempt', 'payload_invalid', 'unknown_job', 'failed_by_handler'));
