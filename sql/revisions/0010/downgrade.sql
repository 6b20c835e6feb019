-- pgqueue revision 0010's downgrade to 0009: undoes upgrade.sql, then drops the functions 0010
-- added (each replaced function's previous version runs after this file).

-- issue 27: durable workflows
drop function if exists pgqueue.workflow_checkpoint(uuid, bigint, integer, text, text, jsonb, double precision, text);
drop function if exists pgqueue.workflow_step_failed(uuid, bigint, integer, text, text, integer, double precision);
drop function if exists pgqueue.workflow_wait(uuid, bigint, integer, text, text, text, double precision);
drop function if exists pgqueue.workflow_child(uuid, bigint, integer, text, jsonb, double precision);
drop function if exists pgqueue.workflow_steps_of(uuid);
drop function if exists pgqueue.signal(uuid, text, jsonb);
drop function if exists pgqueue.prune_workflows(integer);
drop view if exists pgqueue.workflows;
drop index if exists pgqueue.jobs_workflows_idx;
drop table if exists pgqueue.workflow_signals;
drop table if exists pgqueue.workflow_steps;
select 1;
-- issue 26: a retried batch member or parent (the functions that call it are replaced after this file)
drop function if exists pgqueue.jobs_requeued(uuid[]);
-- issue 26: the children of a job after they stopped waiting
drop index if exists pgqueue.dependent_jobs_parents_idx;

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

-- issue 28: priority aging and the cheaper partitioned reservation (reserve, reserve_partitions and
-- partition_allowance of 0009 are listed after this file; the 0010 ones take other arguments)
drop function pgqueue.set_aging(text, double precision);
drop function pgqueue.aged_priority(text, interval, timestamptz, smallint[]);
drop function pgqueue.reserve_partitions(pgqueue.queues, smallint, integer, timestamptz, timestamptz);
drop function pgqueue.partition_allowance(pgqueue.queues, text, integer, timestamptz);
alter table pgqueue.queues drop column aging;
