-- pgqueue revision 0005, downgrade to 0004: drops the history tables and the functions 0005
-- added; the migration then runs the frozen functions 0005 replaced again (ack, release and
-- fail of 0002, cancel and reserve of 0004).
drop function pgqueue.ack(uuid[], bigint[], double precision[], double precision[], boolean);
drop function pgqueue.release(uuid, bigint, double precision, double precision, double precision);
drop function pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision);
drop function pgqueue.prune_history(double precision, double precision, integer);
drop function pgqueue.record_outcomes(text, text[], text[], double precision[], double precision[]);
drop table pgqueue.job_stats;
drop table pgqueue.completed_jobs;
alter table pgqueue.jobs drop column due_at;
