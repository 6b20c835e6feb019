-- pgqueue.next_due(queues) -> the earliest moment a job of these queues becomes reservable
-- That is the earliest available_at: a delayed job's due time, or the end of a lease that
-- may expire. Null when the queues hold no jobs. Each priority level costs one index probe.
-- Queue controls (pgqueue.queues): a paused queue is left out (resuming it notifies); a
-- rate-limited queue is due no earlier than its next token; a queue at its concurrency limit
-- is looked at again 50 ms later (an ack sends no notification, to keep acks cheap). Issue 28: so
-- is a queue served by partition (queues.partitioned) with a job due now, which its partitions'
-- limits may hold back (without this, an idle worker would reserve nothing in a tight loop).
-- From psql:  select pgqueue.next_due(array['default']);
create or replace function pgqueue.next_due(p_queues text[])
returns timestamptz
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
    v_queue text;
    v_priority smallint;
    v_at timestamptz;
    v_best timestamptz;
    v_queue_best timestamptz;
    v_control pgqueue.queues;
    v_now timestamptz := clock_timestamp();
    v_running integer;
begin
    foreach v_queue in array coalesce(p_queues, '{}'::text[]) loop
        v_queue_best := null;
        select q.* into v_control from pgqueue.queues q where q.name = v_queue;
        continue when found and v_control.paused;
        select max(j.priority) into v_priority from pgqueue.jobs j where j.queue = v_queue;
        while v_priority is not null loop
            select min(j.available_at) into v_at
            from pgqueue.jobs j where j.queue = v_queue and j.priority = v_priority;
            if v_at is not null and (v_queue_best is null or v_at < v_queue_best) then
                v_queue_best := v_at;
            end if;
            select max(j.priority) into v_priority
            from pgqueue.jobs j where j.queue = v_queue and j.priority < v_priority;
        end loop;
        if v_queue_best is not null and v_control.rate_limit is not null then
            v_queue_best := greatest(v_queue_best, v_control.rate_refilled_at
                + (1.0 - least(1.0, v_control.rate_tokens)) * v_control.rate_period / v_control.rate_limit);
        end if;
        if v_queue_best is not null and v_queue_best <= v_now and v_control.concurrency is not null then
            select count(*) into v_running from pgqueue.jobs j
            where j.queue = v_queue and j.token is not null and j.available_at > v_now;
            if v_running >= v_control.concurrency then
                v_queue_best := v_now + interval '50 milliseconds';
            end if;
        end if;
        if v_queue_best is not null and v_queue_best <= v_now and v_control.partitioned then
            v_queue_best := v_now + interval '50 milliseconds';
        end if;
        if v_queue_best is not null and (v_best is null or v_queue_best < v_best) then
            v_best := v_queue_best;
        end if;
    end loop;
    return v_best;
end
$$;

comment on function pgqueue.next_due(text[]) is
    'pgqueue: earliest available_at (due time or lease end) over the given queues, or null.';
