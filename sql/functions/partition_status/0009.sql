-- pgqueue.partition_status(queue) -> one row per partition of the queue (issue 28)
-- Every partition with a job in the queue or an override (pgqueue.set_partition_limit), with its
-- jobs running (reserved, lease live), waiting (ready now) and delayed, and the limits reserve
-- applies to it: concurrency and rate (its override, else the queue's per-partition values; null:
-- none), its fair share weight, and whether it has an override. Jobs without a partition are not
-- listed. A snapshot: counts move while it runs.
-- From psql:  select * from pgqueue.partition_status('orders') order by waiting desc;
create or replace function pgqueue.partition_status(p_queue text)
returns table (queue text, partition text, running bigint, waiting bigint, delayed bigint, concurrency integer,
               rate_limit integer, rate_period_seconds double precision, weight integer, overridden boolean)
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
           coalesce(o.concurrency is not null or o.rate_limit is not null or o.weight is not null, false)
    from named n
    left join counts c on c.partition = n.partition
    left join pgqueue.partitions o on o.queue = p_queue and o.partition = n.partition
    left join pgqueue.queues q on q.name = p_queue
$$;

comment on function pgqueue.partition_status(text) is
    'pgqueue: per partition of a queue: jobs running, waiting and delayed, its concurrency, rate and weight.';
