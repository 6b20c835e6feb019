-- pgqueue revision 0008, downgrade to 0007: undoes 0008_schema.sql and its functions; the
-- migration then runs the frozen copies of the functions 0008 replaced, as 0007 had them.

-- Issue 24, item 4 (the migration then runs 0005's record_outcomes again).
drop function pgqueue.release_interrupted(uuid, bigint, double precision, double precision);
alter table pgqueue.job_stats drop column given_back;
-- A cancel notification checked with the database (issue 24, item 8): new in 0008.
drop function if exists pgqueue.cancelled(uuid[], bigint[]);
