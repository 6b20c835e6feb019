-- pgqueue revision 0009, downgrade to 0008: undoes upgrade.sql and drops the functions 0009 added;
-- the migration then runs the previous version of each function 0009 replaced.

-- issue 26: results
drop trigger failed_jobs_recorded on pgqueue.failed_jobs;
drop function pgqueue.failure_recorded();
drop table pgqueue.job_results;
drop table pgqueue.attempt_failures;
alter table pgqueue.failed_jobs drop column worker, drop column duration;
drop function pgqueue.ack_results(uuid[], bigint[], double precision[], double precision[], boolean, jsonb[], double precision[]);
drop function pgqueue.store_result(uuid, bigint, jsonb);
drop function pgqueue.job_state(uuid);
drop function pgqueue.job_attempts(uuid);
drop function pgqueue.prune_results(double precision, integer);
drop function pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision, text);
drop function pgqueue.release(uuid, bigint, double precision, double precision, double precision, jsonb);
