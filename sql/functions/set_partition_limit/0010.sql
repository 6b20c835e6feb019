-- pgqueue.set_partition_limit(queue, partition, concurrency, rate_limit, rate_period_seconds, burst, weight)
-- Issue 28: an override for one named partition of a queue: its own concurrency and/or rate
-- (replacing the queue's per-partition values from pgqueue.set_partition_limits; null: the
-- queue's) and its fair share weight (1 to 1000; null: 1). All nulls remove the override. The
-- partition's token bucket is kept (a new rate starts with a full one).
-- Changed live: the next reservation uses the new values; idle workers are woken.
-- Revision 0010 (adaptive limits per partition): a concurrency given is a fixed override, which
-- replaces the partition's adaptive limit and its own adaptive bounds (an override wins); a null
-- concurrency keeps an adaptive partition's current limit and bounds
-- (pgqueue.set_partition_adaptive_limit).
-- From psql:  select pgqueue.set_partition_limit('orders', 'tenant:big', 20, null, null);
--             select pgqueue.set_partition_limit('orders', 'tenant:big', null, null, null, null, 3);  -- weight 3
create or replace function pgqueue.set_partition_limit(p_queue text, p_partition text, p_concurrency integer,
                                                       p_rate_limit integer, p_rate_period_seconds double precision,
                                                       p_burst integer default null, p_weight integer default null)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
begin
    if v_problem is null then
        v_problem := pgqueue.partition_problem(to_jsonb(p_partition));
    end if;
    if v_problem is null then
        v_problem := pgqueue.partition_limits_problem(p_concurrency, p_rate_limit, p_rate_period_seconds, p_burst,
                                                      p_weight);
    end if;
    if v_problem is not null then
        raise exception 'pgqueue.set_partition_limit: %', v_problem using errcode = '22023';
    end if;
    insert into pgqueue.partitions as p (queue, partition, concurrency, rate_limit, rate_period, rate_burst, weight)
    values (p_queue, p_partition, p_concurrency, p_rate_limit, make_interval(secs => p_rate_period_seconds), p_burst,
            p_weight)
    on conflict (queue, partition) do update
        set concurrency = case when excluded.concurrency is null and p.adaptive_limit then p.concurrency
                               else excluded.concurrency end,
            adaptive_limit = excluded.concurrency is null and p.adaptive_limit,
            adaptive_min = case when excluded.concurrency is null then p.adaptive_min end,
            adaptive_max = case when excluded.concurrency is null then p.adaptive_max end,
            adaptive_acks = case when excluded.concurrency is null then p.adaptive_acks else 0 end,
            adaptive_cut_at = case when excluded.concurrency is null then p.adaptive_cut_at end,
            rate_limit = excluded.rate_limit, rate_period = excluded.rate_period,
            rate_burst = excluded.rate_burst, weight = excluded.weight,
            -- A new rate starts with a full bucket; a changed one keeps its tokens.
            rate_tokens = case when p.rate_limit is null then null else p.rate_tokens end,
            updated_at = now();
    insert into pgqueue.queues as q (name, partitioned) values (p_queue, true)
    on conflict (name) do update
        set partitioned = q.partition_concurrency is not null or q.partition_rate_limit is not null or q.partition_fair
                          or q.partition_adaptive_min is not null
                          or exists (select 1 from pgqueue.partitions p where p.queue = p_queue
                                     and (p.concurrency is not null or p.rate_limit is not null or p.weight is not null)),
            partition_adaptive = q.partition_adaptive_min is not null
                                 or exists (select 1 from pgqueue.partitions p where p.queue = p_queue
                                            and p.adaptive_min is not null),
            updated_at = now();
    perform pg_notify('pgqueue', p_queue);
end
$$;

comment on function pgqueue.set_partition_limit(text, text, integer, integer, double precision, integer, integer) is
    'pgqueue: set (or remove, with nulls) one partition''s override: its concurrency, rate and fair share weight.';
