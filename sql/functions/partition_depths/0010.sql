-- pgqueue.partition_depths(top) -> per queue, its p_top busiest partitions and the rest in one row
-- issue 28: the per-partition metrics of a worker's depth sampler (pgqueue_partition_jobs,
-- pgqueue_partition_concurrency_limit). For each queue with jobs that have a partition: its p_top
-- partitions with the most jobs running + waiting (ties: by name), each with its jobs running (reserved,
-- lease live), waiting (ready now) and its concurrency limit (its override or adaptive limit, else the
-- queue's per-partition one; null: none); then one row with partition null summing the others (a
-- partition named 'other' is always counted there, so the label value 'other' means only that) and the
-- sum of their limits. partitions: how many partitions a row stands for. So any number of partitions
-- gives at most p_top + 1 rows per queue. One scan of the partitioned jobs, like pgqueue.queue_stats.
-- From psql:  select * from pgqueue.partition_depths(20);
create or replace function pgqueue.partition_depths(p_top integer)
returns table (queue text, partition text, running bigint, waiting bigint, concurrency bigint, partitions bigint)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    with counts as (
        select j.queue, j.partition,
               count(*) filter (where j.token is not null and j.available_at > now()) as running,
               count(*) filter (where j.available_at <= now()) as waiting
        from pgqueue.jobs j
        where j.partition is not null
        group by j.queue, j.partition
    ), ranked as (
        select c.queue, c.partition, c.running, c.waiting, coalesce(o.concurrency, q.partition_concurrency) as concurrency,
               row_number() over (partition by c.queue
                                  order by c.partition = 'other', c.running + c.waiting desc, c.partition) as rank
        from counts c
        left join pgqueue.queues q on q.name = c.queue
        left join pgqueue.partitions o on o.queue = c.queue and o.partition = c.partition
    )
    select r.queue, case when r.rank <= p_top and r.partition <> 'other' then r.partition end,
           sum(r.running)::bigint, sum(r.waiting)::bigint, sum(r.concurrency)::bigint, count(*)
    from ranked r
    group by r.queue, case when r.rank <= p_top and r.partition <> 'other' then r.partition end
    order by r.queue, 2 nulls last
$$;

comment on function pgqueue.partition_depths(integer) is
    'pgqueue: per queue, the busiest partitions'' jobs running and waiting and their limits, the rest summed in one row (metrics).';
