-- pgqueue.reserve_partitions(queue row, priority, take, now, ready_by) -> ids, doomed, cursor, credit
-- Issue 28: pgqueue.reserve's first step for a queue served by partition (queues.partitioned),
-- called with the queue's row locked (so every reservation of the queue, by any worker on any
-- host, sees the grants committed before it and none beside it) and given that row (revision
-- 0010: it read the row again). It picks up to p_take ready jobs of one priority, partition by
-- partition, and locks them (FOR UPDATE SKIP LOCKED); ready: due by p_ready_by (p_now, or
-- earlier under priority aging: pgqueue.aged_priority).
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
-- - Fair shares alone (no per-partition limit and no row in pgqueue.partitions: every weight
--   is 1 and nothing caps a partition): the same turns, k at a time (revision 0010): one
--   statement walks the next k partitions (k x r <= what is left, one index probe each), then
--   one statement per turn locks its jobs (0009: two statements per turn).
-- - Jobs of the queue without a partition come after the round, looked for among the oldest
--   p_take + 100 ready jobs of the priority only (a scan past a partition's backlog would cost a
--   heap visit per job): in a queue served by partition, give every job a partition.
-- Returns the ids (in the order granted), whether any of them may not run again (doomed: the
-- caller moves those to failed_jobs), and the queue's cursor and credit as they are now.
drop function if exists pgqueue.reserve_partitions(text, smallint, integer, timestamptz);

create or replace function pgqueue.reserve_partitions(p_control pgqueue.queues, p_priority smallint, p_take integer,
                                                      p_now timestamptz, p_ready_by timestamptz,
                                                      out ids uuid[], out doomed boolean,
                                                      out cursor_at text, out credit integer)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    p_queue text := p_control.name;
    v_got uuid[];
    v_got_doomed boolean;
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
    v_walk text[];
    v_next text;
    v_round_granted integer := 0;
begin
    ids := '{}';
    doomed := false;
    v_last := coalesce(p_control.partition_cursor, '');
    v_part := v_last;
    -- The partition served last may have a part of its turn left (it was cut short by p_take).
    v_credit := case when v_last <> '' then p_control.partition_credit else 0 end;
    v_credit_left := 0;
    v_whole_round := v_last = '';
    -- Fair shares alone (no per-partition limit, no override row): every partition may take
    -- all and weighs 1, known without a look-up per partition.
    v_plain := p_control.partition_concurrency is null and p_control.partition_rate_limit is null
               and not exists (select 1 from pgqueue.partitions p where p.queue = p_queue);
    if v_plain then
        loop
            if v_credit > 0 then
                -- The turn of the partition served last goes on (v_part is that partition).
                v_n := least(v_left, v_credit);
                select array_agg(c.id order by c.available_at), coalesce(bool_or(c.doomed), false)
                into v_got, v_got_doomed from (
                    select j.id, j.available_at,
                           j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                           or j.retry_until < p_now as doomed
                    from pgqueue.jobs j
                    where j.queue = p_queue and j.priority = p_priority and j.partition = v_part
                      and j.available_at <= p_ready_by
                    order by j.available_at
                    limit v_n
                    for update skip locked
                ) c;
                if v_got is not null then
                    ids := ids || v_got;
                    doomed := doomed or v_got_doomed;
                    v_left := v_left - cardinality(v_got);
                    v_round_granted := v_round_granted + cardinality(v_got);
                    v_last := v_part;
                    if cardinality(v_got) = v_credit then
                        v_full_weight := v_full_weight + 1;
                    end if;
                    v_credit_left := case when cardinality(v_got) = v_n and v_n < v_credit then v_credit - v_n else 0 end;
                end if;
                v_credit := 0;
                exit when v_left <= 0;
                continue;
            end if;
            -- The next k partitions after v_part with jobs of this priority: one index probe each
            -- (jobs_partition_idx), k turns of r jobs fitting in what is left.
            select array_agg(w.part order by w.n) into v_walk from (
                with recursive walk(n, part) as (
                    select 1, (select min(j.partition) from pgqueue.jobs j
                               where j.queue = p_queue and j.priority = p_priority and j.partition > v_part)
                    union all
                    select w.n + 1, (select min(j.partition) from pgqueue.jobs j
                                     where j.queue = p_queue and j.priority = p_priority and j.partition > w.part)
                    from walk w
                    where w.part is not null and w.n < greatest(1, v_left / v_round)
                )
                select walk.n, walk.part from walk
            ) w
            where w.part is not null;
            if v_walk is null then
                -- Past the last: the next round starts at the first, unless a whole round gave nothing.
                exit when v_whole_round and v_round_granted = 0;
                -- The next round shares what is left among the partitions whose whole turn was
                -- taken (they may want more). (Only after a whole round: the partitions before
                -- the cursor had no turn yet.)
                if v_whole_round and v_full_weight > 0 then
                    v_round := greatest(1, v_left / v_full_weight);
                end if;
                v_whole_round := true;
                v_full_weight := 0;
                v_round_granted := 0;
                v_part := '';
                continue;
            end if;
            v_n := least(v_left, v_round);
            -- One statement per turn, by partition name: a lateral join over the walk would leave
            -- the planner to guess how selective "partition = <each>" is, and after one tenant's
            -- backlog it scans the queue's order (jobs_reservation_idx) for every partition instead.
            foreach v_next in array v_walk loop
                -- Rows this transaction locked already are not skipped by SKIP LOCKED: left out by id.
                select array_agg(c.id order by c.available_at), coalesce(bool_or(c.doomed), false)
                into v_got, v_got_doomed from (
                    select j.id, j.available_at,
                           j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                           or j.retry_until < p_now as doomed
                    from pgqueue.jobs j
                    where j.queue = p_queue and j.priority = p_priority and j.partition = v_next
                      and j.available_at <= p_ready_by and j.id <> all (ids)
                    order by j.available_at
                    limit v_n
                    for update skip locked
                ) c;
                if v_got is not null then
                    ids := ids || v_got;
                    doomed := doomed or v_got_doomed;
                    v_left := v_left - cardinality(v_got);
                    v_round_granted := v_round_granted + cardinality(v_got);
                    v_last := v_next;
                    if cardinality(v_got) = v_round then
                        v_full_weight := v_full_weight + 1;
                    end if;
                    -- Cut short by p_take (only a walk of one turn can be: k x r <= what is left).
                    v_credit_left := case when v_n < v_round and cardinality(v_got) = v_n then v_round - v_n else 0 end;
                end if;
            end loop;
            v_part := v_walk[cardinality(v_walk)];
            exit when v_left <= 0;
        end loop;
    else
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
            select a.allowance, a.weight, a.tokens into v_n, v_quantum_weight, v_bucket
            from pgqueue.partition_allowance(p_control, v_part, p_take, p_now) a;
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
            select array_agg(c.id order by c.available_at), coalesce(bool_or(c.doomed), false)
            into v_got, v_got_doomed from (
                select j.id, j.available_at,
                       j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                       or j.retry_until < p_now as doomed
                from pgqueue.jobs j
                where j.queue = p_queue and j.priority = p_priority and j.partition = v_part
                  and j.available_at <= p_ready_by and j.id <> all (ids)
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
        ids := ids || v_got;
        doomed := doomed or v_got_doomed;
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
    if array_remove(v_tokens, null) <> '{}' then
        insert into pgqueue.partitions as p (queue, partition, rate_tokens, rate_refilled_at)
        select p_queue, u.name, u.tokens - u.given, p_now
        from unnest(v_names, v_tokens, v_given) as u(name, tokens, given)
        where u.tokens is not null and u.given > 0
        on conflict (queue, partition) do update
            set rate_tokens = excluded.rate_tokens, rate_refilled_at = excluded.rate_refilled_at;
    end if;
    end if;
    cursor_at := p_control.partition_cursor;
    credit := p_control.partition_credit;
    if v_last <> '' and (v_last is distinct from p_control.partition_cursor
                         or v_credit_left <> p_control.partition_credit) then
        update pgqueue.queues q set partition_cursor = v_last, partition_credit = v_credit_left
        where q.name = p_queue;
        cursor_at := v_last;
        credit := v_credit_left;
    end if;

    if v_left > 0 then
        select array_agg(o.id) into v_got from (
            select j.id, j.partition from pgqueue.jobs j
            where j.queue = p_queue and j.priority = p_priority and j.available_at <= p_ready_by
            order by j.available_at
            limit v_left + 100
        ) o
        where o.partition is null;
        if v_got is not null then
            -- Found again by primary key and locked (those another transaction holds are left).
            select array_agg(c.id order by c.available_at), coalesce(bool_or(c.doomed), false)
            into v_got, v_got_doomed from (
                select j.id, j.available_at,
                       j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                       or j.retry_until < p_now as doomed
                from pgqueue.jobs j
                where j.id = any (v_got) and j.available_at <= p_ready_by
                order by j.available_at
                limit v_left
                for update skip locked
            ) c;
            ids := ids || coalesce(v_got, '{}');
            doomed := doomed or coalesce(v_got_doomed, false);
        end if;
    end if;
end
$$;

comment on function pgqueue.reserve_partitions(pgqueue.queues, smallint, integer, timestamptz, timestamptz) is
    'pgqueue: the candidates of one priority of a queue served by partition (limits, weighted round robin), locked.';
