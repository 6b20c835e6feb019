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
--   their names, starting after the one served last (queues.partition_cursor, shared by every
--   worker), each visit giving a partition at most weight x quantum jobs (weight: its override,
--   default 1; quantum 1 in the first round). When a round leaves p_take unfilled and some
--   partitions had more, the next round grows the quantum to what is left over those partitions.
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
    v_override pgqueue.partitions;
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
    v_cursor text;
    v_last text;
    v_wrapped boolean;
    v_quantum integer := 1;
    v_more integer;
    v_cap integer;
    v_rate integer;
    v_period interval;
    v_burst integer;
    v_bucket double precision;
    v_running integer;
begin
    select q.* into v_control from pgqueue.queues q where q.name = p_queue;
    v_cursor := coalesce(v_control.partition_cursor, '');
    v_last := v_cursor;
    loop  -- rounds
        v_more := 0;
        v_part := v_cursor;
        v_wrapped := false;
        loop  -- one round: the partitions after the cursor, then from the first up to the cursor
            select min(j.partition) into v_part from pgqueue.jobs j
            where j.queue = p_queue and j.priority = p_priority and j.partition > v_part;
            if v_part is null then
                exit when v_wrapped or v_cursor = '';
                v_wrapped := true;
                v_part := '';
                continue;
            end if;
            exit when v_wrapped and v_part > v_cursor;
            v_i := array_position(v_names, v_part);
            if v_i is null then
                -- First visit in this call: what the partition may get.
                select p.* into v_override from pgqueue.partitions p where p.queue = p_queue and p.partition = v_part;
                v_cap := coalesce(v_override.concurrency, v_control.partition_concurrency);
                v_n := p_take;
                if v_cap is not null then
                    select count(*) into v_running from pgqueue.jobs j
                    where j.queue = p_queue and j.partition = v_part and j.token is not null and j.available_at > p_now;
                    v_n := greatest(v_cap - v_running, 0);
                end if;
                if v_override.rate_limit is not null then
                    v_rate := v_override.rate_limit; v_period := v_override.rate_period; v_burst := v_override.rate_burst;
                else
                    v_rate := v_control.partition_rate_limit; v_period := v_control.partition_rate_period;
                    v_burst := v_control.partition_rate_burst;
                end if;
                v_bucket := null;
                if v_rate is not null then
                    -- A partition without a bucket yet has a full one.
                    v_bucket := least(coalesce(v_burst, v_rate)::double precision,
                        coalesce(v_override.rate_tokens
                                 + extract(epoch from p_now - v_override.rate_refilled_at)::double precision
                                   * v_rate / extract(epoch from v_period)::double precision,
                                 coalesce(v_burst, v_rate)::double precision));
                    v_n := least(v_n, floor(v_bucket)::integer);
                end if;
                v_names := v_names || v_part;
                v_allow := v_allow || v_n;
                v_weight := v_weight || coalesce(v_override.weight, 1);
                v_tokens := v_tokens || v_bucket;
                v_given := v_given || 0;
                v_i := cardinality(v_names);
            end if;
            v_n := least(v_left, v_allow[v_i], v_quantum * v_weight[v_i]);
            continue when v_n <= 0;
            -- Rows this transaction locked already are not skipped by SKIP LOCKED: left out by id.
            select array_agg(c.id order by c.available_at) into v_got from (
                select j.id, j.available_at from pgqueue.jobs j
                where j.queue = p_queue and j.priority = p_priority and j.partition = v_part
                  and j.available_at <= p_now and j.id <> all (v_ids)
                order by j.available_at
                limit v_n
                for update skip locked
            ) c;
            continue when v_got is null;
            v_ids := v_ids || v_got;
            v_allow[v_i] := v_allow[v_i] - cardinality(v_got);
            v_given[v_i] := v_given[v_i] + cardinality(v_got);
            v_left := v_left - cardinality(v_got);
            v_last := v_part;
            if cardinality(v_got) = v_n and v_allow[v_i] > 0 then
                v_more := v_more + 1;
            end if;
            exit when v_left <= 0;
        end loop;
        exit when v_left <= 0 or v_more = 0;
        v_quantum := greatest(1, v_left / v_more);
    end loop;

    -- Spend the tokens of the partitions under a rate that got jobs.
    insert into pgqueue.partitions as p (queue, partition, rate_tokens, rate_refilled_at)
    select p_queue, u.name, u.tokens - u.given, p_now
    from unnest(v_names, v_tokens, v_given) as u(name, tokens, given)
    where u.tokens is not null and u.given > 0
    on conflict (queue, partition) do update
        set rate_tokens = excluded.rate_tokens, rate_refilled_at = excluded.rate_refilled_at;
    if v_last is distinct from v_control.partition_cursor and v_last <> '' then
        update pgqueue.queues q set partition_cursor = v_last where q.name = p_queue;
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
