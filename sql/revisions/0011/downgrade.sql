-- pgqueue revision 0011's downgrade to 0010: undoes upgrade.sql and drops the functions 0011 added
-- (each replaced function's previous version runs after this file).
select 1;

-- issue 28: reserve_partitions 0011 returns one more out parameter (lost), which 0010's
-- create or replace cannot take away: dropped first (reserve 0010, run after, calls 0010's).
drop function if exists pgqueue.reserve_partitions(pgqueue.queues, smallint, integer, timestamptz, timestamptz);
