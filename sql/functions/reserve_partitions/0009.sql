-- pgqueue.reserve_partitions(queue, priority, take, now) -> the ids of the candidates, locked
-- Issue 28: pgqueue.reserve's first step for a queue served by partition (queues.partitioned),
-- called with the queue's row locked (so every reservation of the queue, by any worker on any
-- host, sees the grants committed before it and none beside it). It picks up to p_take ready jobs
-- of one priority, partition by partition, and locks them (FOR UPDATE SKIP LOCKED):
-- - Each partition may get at most its concurrency limit minus its jobs running (reserved, lease
--   live) and at most the tokens of its bucket (its override in pgqueue.partitions, else the
--   queue's partition_concurrency / partition_rate_*); the tokens it gets are spent here (a
--   candidate the caller then moves to failed_jobs spends one too).
-- - Weighted round robin: the partitions with jobs of this priority are visited in the order of
--   their names, one turn each, round after round, continuing after the partition served last
--   (queues.partition_cursor, shared by every worker). A turn gives a partition up to weight x r
--   jobs (weight: its override, default 1; r = 1 in a call's first round; each later round of
--   the same call shares what is left over the weights of the partitions that took their whole
--   turn, so a call that asks for many jobs needs few rounds). A turn cut short
--   because the call had no more room keeps the rest as queues.partition_credit: the next call
--   goes on with it. So between partitions that stay ready and under their limits, the jobs
--   reserved differ from the proportion of their weights by at most one turn each.
-- - Jobs of the queue without a partition come after the round, looked for among the oldest
--   p_take + 100 ready jobs of the priority only (a scan past a partition's backlog would cost a
--   heap visit per job): in a queue served by partition, give every job a partition.
create or replace function pgqueue.reserve_partitions(p_queue text, p_priority smallint, p_take integer,
                                                      p_now timestamptz)
returns uuid[]
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_control pgqueue.queues;
    v_ids uuid[] := '{}';
    v_got uuid[];
    v_left integer := p_take;
    v_names text[] := '{}';                  -- the partitions visited in this call, and for each:
    v_allow integer[] := '{}';               -- how many it may still get
    v_weight integer[] := '{}';
    v_tokens double precision[] := '{}';     -- its bucket when first visited (null: no rate)
    v_given integer[] := '{}';
    v_i integer;
    v_n integer;
    v_part text;
    v_last text;
    v_quantum integer;
    v_round integer := 1;
    v_credit integer;
    v_credit_left integer;
    v_idle integer := 0;
    v_full_weight integer := 0;
    v_whole_round boolean;
    v_plain boolean;
    v_quantum_weight integer;
    v_bucket double precision;
begin
    select q.* into v_control from pgqueue.queues q where q.name = p_queue;
    v_last := coalesce(v_control.partition_cursor, '');
    v_part := v_last;
    -- The partition served last may have a part of its turn left (it was cut short by p_take).
    v_credit := case when v_last <> '' then v_control.partition_credit else 0 end;
    v_credit_left := 0;
    v_whole_round := v_last = '';
    -- Fair shares alone (no per-partition limit, no override row): every partition may take
    -- all and weighs 1, known without a look-up per partition.
    v_plain := v_control.partition_concurrency is null and v_control.partition_rate_limit is null
               and not exists (select 1 from pgqueue.partitions p where p.queue = p_queue);
    loop
        if v_credit > 0 then
            v_quantum := v_credit;  -- its turn goes on
            v_credit := 0;
        else
            select min(j.partition) into v_part from pgqueue.jobs j
            where j.queue = p_queue and j.priority = p_priority and j.partition > v_part;
            if v_part is null then  -- past the last: the next round starts at the first
                select min(j.partition) into v_part from pgqueue.jobs j
                where j.queue = p_queue and j.priority = p_priority and j.partition is not null;
                exit when v_part is null;
                -- The next round shares what is left among the partitions whose whole turn was
                -- taken (they may want more), in proportion to their weights.
                -- (Only after a whole round: the partitions before the cursor had no turn yet.)
                if v_whole_round and v_full_weight > 0 then
                    v_round := greatest(1, v_left / v_full_weight);
                end if;
                v_whole_round := true;
                v_full_weight := 0;
            end if;
            v_quantum := 0;
        end if;
        v_i := array_position(v_names, v_part);
        if v_i is null then
            -- First visit in this call: what the partition may get (its limits), its weight.
            if v_plain then
                v_n := p_take;
                v_quantum_weight := 1;
                v_bucket := null;
            else
                select a.allowance, a.weight, a.tokens into v_n, v_quantum_weight, v_bucket
                from pgqueue.partition_allowance(p_queue, v_part, p_take, p_now) a;
            end if;
            v_names := v_names || v_part;
            v_allow := v_allow || v_n;
            v_weight := v_weight || v_quantum_weight;
            v_tokens := v_tokens || v_bucket;
            v_given := v_given || 0;
            v_i := cardinality(v_names);
        end if;
        if v_quantum = 0 then
            v_quantum := v_weight[v_i] * v_round;
        end if;
        v_n := least(v_left, v_allow[v_i], v_quantum);
        v_got := null;
        if v_n > 0 then
            -- Rows this transaction locked already are not skipped by SKIP LOCKED: left out by id.
            select array_agg(c.id order by c.available_at) into v_got from (
                select j.id, j.available_at from pgqueue.jobs j
                where j.queue = p_queue and j.priority = p_priority and j.partition = v_part
                  and j.available_at <= p_now and j.id <> all (v_ids)
                order by j.available_at
                limit v_n
                for update skip locked
            ) c;
        end if;
        if v_got is null then
            -- A whole round without a grant: nothing more to give.
            v_idle := v_idle + 1;
            exit when v_idle > cardinality(v_names);
            continue;
        end if;
        v_idle := 0;
        v_ids := v_ids || v_got;
        v_allow[v_i] := v_allow[v_i] - cardinality(v_got);
        v_given[v_i] := v_given[v_i] + cardinality(v_got);
        v_left := v_left - cardinality(v_got);
        v_last := v_part;
        if cardinality(v_got) = v_quantum and v_allow[v_i] > 0 then
            v_full_weight := v_full_weight + v_weight[v_i];
        end if;
        -- Cut short by p_take with jobs and room left: the rest of its turn is its credit.
        v_credit_left := case when cardinality(v_got) = v_n and v_n < v_quantum and v_allow[v_i] > 0
                              then v_quantum - v_n else 0 end;
        exit when v_left <= 0;
    end loop;

    -- Spend the tokens of the partitions under a rate that got jobs.
    insert into pgqueue.partitions as p (queue, partition, rate_tokens, rate_refilled_at)
    select p_queue, u.name, u.tokens - u.given, p_now
    from unnest(v_names, v_tokens, v_given) as u(name, tokens, given)
    where u.tokens is not null and u.given > 0
    on conflict (queue, partition) do update
        set rate_tokens = excluded.rate_tokens, rate_refilled_at = excluded.rate_refilled_at;
    if v_last <> '' and (v_last is distinct from v_control.partition_cursor
                         or v_credit_left <> v_control.partition_credit) then
        update pgqueue.queues q set partition_cursor = v_last, partition_credit = v_credit_left
        where q.name = p_queue;
    end if;

    if v_left > 0 then
        select array_agg(o.id) into v_got from (
            select j.id, j.partition from pgqueue.jobs j
            where j.queue = p_queue and j.priority = p_priority and j.available_at <= p_now
            order by j.available_at
            limit v_left + 100
        ) o
        where o.partition is null;
        if v_got is not null then
            -- Found again by primary key and locked (those another transaction holds are left).
            select array_agg(c.id order by c.available_at) into v_got from (
                select j.id, j.available_at from pgqueue.jobs j
                where j.id = any (v_got) and j.available_at <= p_now
                order by j.available_at
                limit v_left
                for update skip locked
            ) c;
            v_ids := v_ids || coalesce(v_got, '{}');
        end if;
    end if;
    return v_ids;
end
$$;

comment on function pgqueue.reserve_partitions(text, smallint, integer, timestamptz) is
    'pgqueue: the candidates of one priority of a queue served by partition (limits, weighted round robin), locked.';
