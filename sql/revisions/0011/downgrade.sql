-- pgqueue revision 0011's downgrade to 0010: undoes upgrade.sql and drops the functions 0011 added
-- (each replaced function's previous version runs after this file).

-- issue 27 (WAL)
alter table pgqueue.jobs reset (fillfactor);
alter table pgqueue.workflow_steps add constraint workflow_steps_name_unique unique (job_id, name);
-- end issue 27 (WAL)

-- issue 28: reserve_partitions 0011 returns one more out parameter (lost), which 0010's
-- create or replace cannot take away: dropped first (reserve 0010, run after, calls 0010's).
drop function if exists pgqueue.reserve_partitions(pgqueue.queues, smallint, integer, timestamptz, timestamptz);
