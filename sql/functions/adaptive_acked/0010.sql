-- pgqueue.adaptive_acked(queues, partitions) -> nothing
-- issue 28: adaptive limits, the additive increase. Called by pgqueue.ack with the queue and the
-- partition (null: none) of each job it accepted (one element per job), only when some queue has an
-- adaptive limit or adaptive partitions.
-- Per adaptive queue: adds the acks to its window; once the window holds as many acks as the
-- current limit, the limit grows by one (never above adaptive_max), the window restarts, and idle
-- workers are woken.
-- Revision 0010, per adaptive partition (pgqueue.set_partition_adaptive_limit: its own bounds, or the
-- queue's and no fixed override): the same in its row of pgqueue.partitions (created at the queue's
-- per-partition concurrency, where a partition without a row stands), never above its maximum.
-- Replaces adaptive_acked(queues) of revision 0009.
drop function if exists pgqueue.adaptive_acked(text[]);
create or replace function pgqueue.adaptive_acked(p_queues text[], p_partitions text[])
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_grown text;
begin
    -- Lock the rows in name order first: two acks over the same adaptive queues never deadlock.
    perform 1 from pgqueue.queues q
    where q.name = any(p_queues) and q.adaptive_min is not null
    order by q.name
    for update;
    for v_grown in
        with acked as (select a.queue, count(*)::integer as n from unnest(p_queues) a(queue) group by a.queue),
        moved as (
            update pgqueue.queues q
            set concurrency = case when q.adaptive_acks + a.n >= coalesce(q.concurrency, q.adaptive_max)
                                   then least(coalesce(q.concurrency, q.adaptive_max) + 1, q.adaptive_max)
                                   else q.concurrency end,
                adaptive_acks = case when q.adaptive_acks + a.n >= coalesce(q.concurrency, q.adaptive_max) then 0
                                     else q.adaptive_acks + a.n end
            from acked a
            where q.name = a.queue and q.adaptive_min is not null
            returning q.name, q.adaptive_acks = 0 as grown
        )
        select m.name from moved m where m.grown
    loop
        perform pg_notify('pgqueue', v_grown);
    end loop;
    if p_partitions is null or not exists (select from pgqueue.queues q
                                           where q.name = any(p_queues) and q.partition_adaptive) then
        return;
    end if;
    -- The partitions that follow the queue's bounds and have no row yet get one, at the queue's
    -- per-partition concurrency: then every adaptive partition acked here has a row to count in.
    -- Rows are created, then locked, in (queue, partition) order: two acks never deadlock.
    insert into pgqueue.partitions (queue, partition, concurrency, adaptive_limit)
    select a.queue, a.partition,
           least(greatest(coalesce(q.partition_concurrency, q.partition_adaptive_min), q.partition_adaptive_min),
                 q.partition_adaptive_max),
           true
    from (select distinct t.queue, t.partition from unnest(p_queues, p_partitions) t(queue, partition)
          where t.partition is not null) a
    join pgqueue.queues q on q.name = a.queue and q.partition_adaptive_min is not null
    where not exists (select from pgqueue.partitions p where p.queue = a.queue and p.partition = a.partition)
    order by a.queue, a.partition
    on conflict (queue, partition) do nothing;
    perform 1 from pgqueue.partitions p
    join (select distinct t.queue, t.partition from unnest(p_queues, p_partitions) t(queue, partition)
          where t.partition is not null) a on p.queue = a.queue and p.partition = a.partition
    order by p.queue, p.partition
    for update of p;
    for v_grown in
        with acked as (
            select t.queue, t.partition, count(*)::integer as n
            from unnest(p_queues, p_partitions) t(queue, partition)
            where t.partition is not null
            group by t.queue, t.partition
        ),
        standing as (
            select p.queue, p.partition, a.n,
                   -- A row with only a weight or a bucket follows the queue's bounds at its per-partition value.
                   case when p.adaptive_limit then p.concurrency
                        else least(greatest(coalesce(q.partition_concurrency, q.partition_adaptive_min),
                                            q.partition_adaptive_min), q.partition_adaptive_max) end as limit_now,
                   case when p.adaptive_limit then p.adaptive_acks else 0 end as acks_now,
                   coalesce(p.adaptive_max, q.partition_adaptive_max) as top
            from acked a
            join pgqueue.partitions p on p.queue = a.queue and p.partition = a.partition
            join pgqueue.queues q on q.name = a.queue and q.partition_adaptive
            where p.adaptive_min is not null
               or (q.partition_adaptive_min is not null and (p.concurrency is null or p.adaptive_limit))
        ),
        moved as (
            update pgqueue.partitions p
            set concurrency = case when c.acks_now + c.n >= c.limit_now then least(c.limit_now + 1, c.top)
                                   else c.limit_now end,
                adaptive_acks = case when c.acks_now + c.n >= c.limit_now then 0 else c.acks_now + c.n end,
                adaptive_limit = true
            from standing c
            where p.queue = c.queue and p.partition = c.partition
            returning p.queue, c.acks_now + c.n >= c.limit_now and c.limit_now < c.top as grown
        )
        select distinct m.queue from moved m where m.grown
    loop
        perform pg_notify('pgqueue', v_grown);
    end loop;
end
$$;

comment on function pgqueue.adaptive_acked(text[], text[]) is
    'pgqueue: count acks in adaptive queues'' and partitions'' windows and grow their limits by one per full window (called by pgqueue.ack).';
