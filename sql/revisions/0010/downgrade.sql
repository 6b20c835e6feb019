-- pgqueue revision 0010's downgrade to 0009: undoes upgrade.sql, then drops the functions 0010
-- added (each replaced function's previous version runs after this file).
select 1;

-- issue 28: adaptive limits per partition, and a configurable cut
drop function if exists pgqueue.set_partition_adaptive_limit(text, text, integer, integer);
drop function if exists pgqueue.set_adaptive_decrease(text, double precision);
drop function if exists pgqueue.partition_depths(integer);
drop function if exists pgqueue.adaptive_acked(text[], text[]);
drop function if exists pgqueue.partition_status(text);   -- 0009's returns fewer columns: recreated after
-- A partition's adaptive current limit is no override in 0009: the queue's per-partition values again.
update pgqueue.partitions set concurrency = null where adaptive_limit;
drop index if exists pgqueue.queues_adaptive_idx;
create index queues_adaptive_idx on pgqueue.queues (name) where adaptive_min is not null;
alter table pgqueue.partitions drop constraint if exists partitions_adaptive, drop column if exists adaptive_min,
    drop column if exists adaptive_max, drop column if exists adaptive_limit, drop column if exists adaptive_acks,
    drop column if exists adaptive_cut_at;
alter table pgqueue.queues drop constraint if exists queues_adaptive_decrease,
    drop constraint if exists queues_partition_adaptive, drop column if exists adaptive_decrease,
    drop column if exists partition_adaptive_min, drop column if exists partition_adaptive_max,
    drop column if exists partition_adaptive;
-- end issue 28
