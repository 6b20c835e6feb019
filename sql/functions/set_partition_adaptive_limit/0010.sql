-- pgqueue.set_partition_adaptive_limit(queue, partition, min, max) -> nothing
-- issue 28: adaptive limits per partition. Makes a partition's concurrency limit (the one
-- pgqueue.reserve_partitions enforces) move AIMD-style between p_min and p_max, decided by the outcome
-- functions alone, as pgqueue.set_adaptive_limit does for a queue's:
--   pgqueue.backpressure from a job of the partition cuts the PARTITION's limit (not the queue's) to
--     floor(limit x the queue's adaptive_decrease), at least one less, never below p_min; reports
--     from jobs reserved before the partition's last cut do not cut again (one cut per overload);
--   pgqueue.ack raises it by one once as many of its jobs as its current limit were acked since it
--     last moved, never above p_max.
-- p_partition null: the bounds every partition of the queue gets (pgqueue.queues.partition_adaptive_min
-- and _max); a partition starts at the queue's per-partition concurrency (pgqueue.set_partition_limits)
-- clamped into the bounds, or at p_min. A partition with a fixed override (pgqueue.set_partition_limit
-- with a concurrency) keeps it: an override wins. p_partition given: that partition's own bounds (they
-- win over the queue's), starting at its current limit clamped into them.
-- The current limit of a partition is pgqueue.partitions.concurrency (adaptive_limit true). Both
-- bounds null: adaptive off, and the partitions concerned go back to the queue's per-partition
-- concurrency (their adaptive rows are cleared). Changed live; idle workers are woken.
-- From psql:  select pgqueue.set_partition_adaptive_limit('orders', null, 1, 20);        -- every partition
--             select pgqueue.set_partition_adaptive_limit('orders', 'tenant:big', 5, 100);  -- one
create or replace function pgqueue.set_partition_adaptive_limit(p_queue text, p_partition text, p_min integer,
                                                                p_max integer)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
    v_control pgqueue.queues;
begin
    if v_problem is null and p_partition is not null then
        v_problem := pgqueue.partition_problem(to_jsonb(p_partition));
    end if;
    if v_problem is null and (p_min is null) <> (p_max is null) then
        v_problem := format('give both min and max (or neither, to turn adaptive off), got %s and %s',
                            coalesce(p_min::text, 'null'), coalesce(p_max::text, 'null'));
    end if;
    if v_problem is null and p_min is not null and (p_min < 1 or p_max < p_min) then
        v_problem := format('need 1 <= min <= max, got min %s and max %s', p_min, p_max);
    end if;
    if v_problem is not null then
        raise exception 'pgqueue.set_partition_adaptive_limit: %', v_problem using errcode = '22023';
    end if;
    insert into pgqueue.queues (name) values (p_queue) on conflict (name) do nothing;
    select q.* into v_control from pgqueue.queues q where q.name = p_queue for update;
    if p_partition is null then
        update pgqueue.queues q
        set partition_adaptive_min = p_min, partition_adaptive_max = p_max,
            partition_concurrency = case when p_min is null then q.partition_concurrency
                                         else least(greatest(coalesce(q.partition_concurrency, p_min), p_min), p_max) end,
            updated_at = now()
        where q.name = p_queue;
        -- The partitions that follow the queue's bounds (no own bounds, no fixed override).
        if p_min is null then
            update pgqueue.partitions p
            set concurrency = null, adaptive_limit = false, adaptive_acks = 0, adaptive_cut_at = null, updated_at = now()
            where p.queue = p_queue and p.adaptive_limit and p.adaptive_min is null;
        else
            update pgqueue.partitions p
            set concurrency = least(greatest(p.concurrency, p_min), p_max), adaptive_acks = 0, adaptive_cut_at = null,
                updated_at = now()
            where p.queue = p_queue and p.adaptive_limit and p.adaptive_min is null;
        end if;
    elsif p_min is null then
        update pgqueue.partitions p
        set adaptive_min = null, adaptive_max = null, adaptive_acks = 0, adaptive_cut_at = null,
            -- Back to the queue's bounds (at its limit clamped into them), else to no adaptive limit.
            adaptive_limit = v_control.partition_adaptive_min is not null,
            concurrency = case when v_control.partition_adaptive_min is null then null
                               else least(greatest(p.concurrency, v_control.partition_adaptive_min),
                                          v_control.partition_adaptive_max) end,
            updated_at = now()
        where p.queue = p_queue and p.partition = p_partition and p.adaptive_min is not null;
    else
        insert into pgqueue.partitions as p (queue, partition, concurrency, adaptive_min, adaptive_max, adaptive_limit)
        values (p_queue, p_partition,
                least(greatest(coalesce(v_control.partition_concurrency, p_min), p_min), p_max), p_min, p_max, true)
        on conflict (queue, partition) do update
            set concurrency = least(greatest(coalesce(p.concurrency, v_control.partition_concurrency, p_min), p_min),
                                    p_max),
                adaptive_min = p_min, adaptive_max = p_max, adaptive_limit = true, adaptive_acks = 0,
                adaptive_cut_at = null, updated_at = now();
    end if;
    update pgqueue.queues q
    set partition_adaptive = q.partition_adaptive_min is not null
                             or exists (select 1 from pgqueue.partitions p where p.queue = p_queue
                                        and p.adaptive_min is not null),
        partitioned = q.partition_concurrency is not null or q.partition_rate_limit is not null or q.partition_fair
                      or q.partition_adaptive_min is not null
                      or exists (select 1 from pgqueue.partitions p where p.queue = p_queue
                                 and (p.concurrency is not null or p.rate_limit is not null or p.weight is not null))
    where q.name = p_queue;
    perform pg_notify('pgqueue', p_queue);
end
$$;

comment on function pgqueue.set_partition_adaptive_limit(text, text, integer, integer) is
    'pgqueue: let the concurrency limit of every partition of a queue (partition null) or of one partition move AIMD-style within [min, max]; nulls: off.';
