-- pgqueue revision 0010's downgrade to 0009: undoes upgrade.sql, then drops the functions 0010
-- added (each replaced function's previous version runs after this file).
select 1;

-- issue 28: priority aging and the cheaper partitioned reservation (reserve, reserve_partitions and
-- partition_allowance of 0009 are listed after this file; the 0010 ones take other arguments)
drop function pgqueue.set_aging(text, double precision);
drop function pgqueue.aged_priority(text, interval, timestamptz, smallint[]);
drop function pgqueue.reserve_partitions(pgqueue.queues, smallint, integer, timestamptz, timestamptz);
drop function pgqueue.partition_allowance(pgqueue.queues, text, integer, timestamptz);
alter table pgqueue.queues drop column aging;
