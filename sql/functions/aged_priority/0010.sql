-- pgqueue.aged_priority(queue, aging, now, skip) -> priority, ready_by
-- Issue 28, priority aging (queues.aging): which priority level of a queue pgqueue.reserve serves
-- next, and how far. A ready job of priority p that became due at t counts as priority
--     effective = least(p + floor((now - t) / aging), the highest priority with ready jobs)
-- (one level per `aging` waited, never above the queue's top level), and jobs are served by
-- effective priority, highest first, then the one due first (then the higher priority). Within a
-- level effective priority only falls from its oldest job on, so the level whose oldest ready job
-- comes first is served, up to ready_by: its jobs that still come before the oldest ready job of
-- every other level (all of its ready jobs when no other level has one). The caller reserves from
-- that level (due by ready_by) and asks again. p_skip: levels left out (the caller found nothing
-- it could take there in this call). priority null: no ready job in the levels looked at.
-- Cost: two index probes per priority level present in the queue (jobs_reservation_idx).
create or replace function pgqueue.aged_priority(p_queue text, p_aging interval, p_now timestamptz, p_skip smallint[],
                                                 out priority smallint, out ready_by timestamptz)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
    v_levels smallint[] := '{}';
    v_heads timestamptz[] := '{}';
    v_effective bigint[] := '{}';
    v_level smallint;
    v_head timestamptz;
    v_seconds double precision := extract(epoch from p_aging);
    v_best integer;
    v_second integer;
    v_i integer;
    v_e2 bigint;
begin
    select max(j.priority) into v_level from pgqueue.jobs j where j.queue = p_queue;
    while v_level is not null loop
        if v_level <> all (coalesce(p_skip, '{}'::smallint[])) then
            -- The oldest job of the level (a reserved one's available_at is its lease's end, later).
            select min(j.available_at) into v_head from pgqueue.jobs j where j.queue = p_queue and j.priority = v_level;
            if v_head <= p_now then
                v_levels := v_levels || v_level;
                v_heads := v_heads || v_head;
            end if;
        end if;
        select max(j.priority) into v_level from pgqueue.jobs j where j.queue = p_queue and j.priority < v_level;
    end loop;
    if cardinality(v_levels) = 0 then
        return;
    end if;
    -- Levels are in descending order: the first is the top, the bound.
    for v_i in 1 .. cardinality(v_levels) loop
        v_effective := v_effective || least(v_levels[v_i]::bigint
                                            + floor(extract(epoch from p_now - v_heads[v_i]) / v_seconds)::bigint,
                                            v_levels[1]::bigint);
    end loop;
    -- The best and the runner-up: effective priority desc, due first, higher priority (the order of the walk).
    for v_i in 1 .. cardinality(v_levels) loop
        if v_best is null or v_effective[v_i] > v_effective[v_best]
           or (v_effective[v_i] = v_effective[v_best] and v_heads[v_i] < v_heads[v_best]) then
            v_second := v_best;
            v_best := v_i;
        elsif v_second is null or v_effective[v_i] > v_effective[v_second]
              or (v_effective[v_i] = v_effective[v_second] and v_heads[v_i] < v_heads[v_second]) then
            v_second := v_i;
        end if;
    end loop;
    priority := v_levels[v_best];
    ready_by := p_now;
    if v_second is not null then
        -- A job of the best level due at t comes before the runner-up's oldest (due h2, effective
        -- e2) when its effective priority is above e2, or equal to it and t <= h2.
        v_e2 := v_effective[v_second];
        ready_by := least(p_now - p_aging * greatest(v_e2 - priority, 0), v_heads[v_second]);
        if v_e2 < v_levels[1] then
            ready_by := greatest(ready_by, p_now - p_aging * greatest(v_e2 + 1 - priority, 0));
        end if;
        ready_by := least(ready_by, p_now);
    end if;
end
$$;

comment on function pgqueue.aged_priority(text, interval, timestamptz, smallint[]) is
    'pgqueue: under priority aging, the priority level a reservation serves next and the due time it serves it up to.';
