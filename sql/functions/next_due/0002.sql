-- pgqueue.next_due(queues) -> the earliest moment a job of these queues becomes reservable
-- That is the earliest available_at: a delayed job's due time, or the end of a lease that
-- may expire. Null when the queues hold no jobs. Each priority level costs one index probe.
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
begin
    foreach v_queue in array coalesce(p_queues, '{}'::text[]) loop
        select max(j.priority) into v_priority from pgqueue.jobs j where j.queue = v_queue;
        while v_priority is not null loop
            select min(j.available_at) into v_at
            from pgqueue.jobs j where j.queue = v_queue and j.priority = v_priority;
            if v_at is not null and (v_best is null or v_at < v_best) then
                v_best := v_at;
            end if;
            select max(j.priority) into v_priority
            from pgqueue.jobs j where j.queue = v_queue and j.priority < v_priority;
        end loop;
    end loop;
    return v_best;
end
$$;

comment on function pgqueue.next_due(text[]) is
    'pgqueue: earliest available_at (due time or lease end) over the given queues, or null.';
