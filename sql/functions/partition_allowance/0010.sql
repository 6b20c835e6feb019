-- pgqueue.partition_allowance(queue row, partition, take, now) -> allowance, weight, tokens
-- (revision 0010: given the queue's row, which pgqueue.reserve has read and locked, instead of its
-- name: one primary-key probe less per partition visited)
-- Issue 28: what pgqueue.reserve_partitions may give one partition of a queue now: at most p_take,
-- its concurrency limit minus its jobs running (reserved, lease live), and the tokens of its bucket
-- refilled to now (a partition without a bucket yet has a full one); the limits are its override
-- (pgqueue.partitions), else the queue's per-partition ones. tokens is null without a rate.
-- (issue 28, revision 0010: reserve_partitions reads the same for a walk of partitions in one
-- statement and no longer calls this; kept for psql, and its reading must stay the same as that.)
drop function if exists pgqueue.partition_allowance(text, text, integer, timestamptz);

create or replace function pgqueue.partition_allowance(p_control pgqueue.queues, p_partition text, p_take integer,
                                                       p_now timestamptz)
returns table (allowance integer, weight integer, tokens double precision)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
    p_queue text := p_control.name;
    v_control pgqueue.queues := p_control;
    v_override pgqueue.partitions;
    v_cap integer;
    v_running integer;
    v_rate integer;
    v_period interval;
    v_capacity double precision;
begin
    select p.* into v_override from pgqueue.partitions p where p.queue = p_queue and p.partition = p_partition;
    allowance := p_take;
    weight := coalesce(v_override.weight, 1);
    v_cap := coalesce(v_override.concurrency, v_control.partition_concurrency);
    if v_cap is not null then
        select count(*) into v_running from pgqueue.jobs j
        where j.queue = p_queue and j.partition = p_partition and j.token is not null and j.available_at > p_now;
        allowance := greatest(v_cap - v_running, 0);
    end if;
    if v_override.rate_limit is not null then
        v_rate := v_override.rate_limit;
        v_period := v_override.rate_period;
        v_capacity := coalesce(v_override.rate_burst, v_rate);
    else
        v_rate := v_control.partition_rate_limit;
        v_period := v_control.partition_rate_period;
        v_capacity := coalesce(v_control.partition_rate_burst, v_rate);
    end if;
    if v_rate is not null then
        tokens := least(v_capacity, coalesce(v_override.rate_tokens
                                             + extract(epoch from p_now - v_override.rate_refilled_at)::double precision
                                               * v_rate / extract(epoch from v_period)::double precision,
                                             v_capacity));
        allowance := least(allowance, floor(tokens)::integer);
    end if;
    return next;
end
$$;

comment on function pgqueue.partition_allowance(pgqueue.queues, text, integer, timestamptz) is
    'pgqueue: how many jobs one partition of a queue may be given now (its limits), its weight and its bucket.';
