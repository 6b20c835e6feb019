-- pgqueue.partition_status(queue) -> one row per partition of the queue (issue 28)
-- Every partition with a job in the queue or an override (pgqueue.set_partition_limit), with its
-- jobs running (reserved, lease live), waiting (ready now) and delayed, and the limits reserve
-- applies to it: concurrency and rate (its override, else the queue's per-partition values; null:
-- none), its fair share weight, and whether it has an override. Jobs without a partition are not
-- listed. A snapshot: counts move while it runs.
-- Revision 0010 (adaptive limits per partition): adaptive_min and adaptive_max, the bounds its
-- concurrency moves in (its own, else the queue's for every partition; null: not adaptive), its
-- concurrency being then the adaptive limit's current value. An adaptive limit is no override
-- (overridden: a fixed concurrency, a rate, a weight or its own adaptive bounds). The columns changed:
-- the function is created anew (a replaced one cannot return other columns).
-- From psql:  select * from pgqueue.partition_status('orders') order by waiting desc;
drop function if exists pgqueue.partition_status(text);
create or replace function pgqueue.partition_status(p_queue text)
returns table (queue text, partition text, running bigint, waiting bigint, delayed bigint, concurrency integer,
               rate_limit integer, rate_period_seconds double precision, weight integer, overridden boolean,
               adaptive_min integer, adaptive_max integer)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    with counts as (
        select j.partition,
               count(*) filter (where j.token is not null and j.available_at > now()) as running,
               count(*) filter (where j.available_at <= now()) as waiting,
               count(*) filter (where j.token is null and j.available_at > now()) as delayed
        from pgqueue.jobs j
        where j.queue = p_queue and j.partition is not null
        group by j.partition
    ), named as (
        select c.partition from counts c
        union
        select p.partition from pgqueue.partitions p
        where p.queue = p_queue and (p.concurrency is not null or p.rate_limit is not null or p.weight is not null)
    )
    select p_queue, n.partition, coalesce(c.running, 0), coalesce(c.waiting, 0), coalesce(c.delayed, 0),
           coalesce(o.concurrency, q.partition_concurrency),
           case when o.rate_limit is not null then o.rate_limit else q.partition_rate_limit end,
           extract(epoch from case when o.rate_limit is not null then o.rate_period
                                   else q.partition_rate_period end)::double precision,
           coalesce(o.weight, 1),
           coalesce((o.concurrency is not null and not o.adaptive_limit) or o.adaptive_min is not null
                    or o.rate_limit is not null or o.weight is not null, false),
           coalesce(o.adaptive_min, case when o.concurrency is null or o.adaptive_limit then q.partition_adaptive_min end),
           coalesce(o.adaptive_max, case when o.concurrency is null or o.adaptive_limit then q.partition_adaptive_max end)
    from named n
    left join counts c on c.partition = n.partition
    left join pgqueue.partitions o on o.queue = p_queue and o.partition = n.partition
    left join pgqueue.queues q on q.name = p_queue
$$;

comment on function pgqueue.partition_status(text) is
    'pgqueue: per partition of a queue: jobs running, waiting and delayed, its concurrency (adaptive: its bounds), rate and weight.';
