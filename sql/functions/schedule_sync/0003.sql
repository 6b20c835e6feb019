-- pgqueue.schedule_sync(names, expressions, timezones, catch_ups)
--   -> (name, now, changed_at, last_tick)
-- A worker declares the schedules its code holds (one array element per schedule) and gets
-- back, per schedule, the database clock, when the schedule was first seen or last changed
-- (expression, timezone or catch-up), and the latest tick enqueued. The worker computes the
-- due ticks from these database times only (never its own clock) and enqueues each with
-- pgqueue.enqueue_tick. A schedule no worker declares any more is left as it is (seen_at
-- stops moving) and is never ticked: removing it from the code stops it.
-- From psql:  select * from pgqueue.schedule_sync(array['app:Nightly'], array['0 3 * * *'], array['Europe/Paris'], array[1]);
create or replace function pgqueue.schedule_sync(p_names text[], p_expressions text[], p_timezones text[],
                                                 p_catch_ups integer[])
returns table (name text, now timestamptz, changed_at timestamptz, last_tick timestamptz)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    insert into pgqueue.schedules as s (name, expression, timezone, catch_up, changed_at, seen_at)
    select d.name, d.expression, d.timezone, d.catch_up, clock_timestamp(), clock_timestamp()
    from unnest(p_names, p_expressions, p_timezones, p_catch_ups) as d(name, expression, timezone, catch_up)
    order by d.name  -- one lock order for every worker: no deadlock between them
    on conflict on constraint schedules_pkey do update
        set expression = excluded.expression, timezone = excluded.timezone, catch_up = excluded.catch_up,
            changed_at = case when (s.expression, s.timezone, s.catch_up)
                                   is distinct from (excluded.expression, excluded.timezone, excluded.catch_up)
                              then excluded.changed_at else s.changed_at end,
            seen_at = excluded.seen_at;
    return query
    select s.name, clock_timestamp(), s.changed_at,
           (select max(t.tick) from pgqueue.schedule_ticks t where t.schedule = s.name)
    from pgqueue.schedules s
    where s.name = any(p_names)
    order by s.name;
end
$$;

comment on function pgqueue.schedule_sync(text[], text[], text[], integer[]) is
    'pgqueue: record the schedules a worker declares; returns the database clock, change time and last enqueued tick of each.';
