-- pgqueue.schedule_state(names)
--   -> (name, expression, timezone, catch_up, has_template, now, changed_at, last_tick)
-- What a worker's scheduler reads before it ticks, per registered schedule among p_names (names
-- not registered are left out): the schedule as registered (expression, timezone, catch-up);
-- whether the template of its jobs is registered (schedules registered before revision 0008 have
-- none until registered again, and pgqueue.enqueue_tick refuses their ticks); the database clock;
-- when the schedule took its current form (first registered, or expression, timezone or catch-up
-- changed); and its latest enqueued tick that is not after the database clock (a tick dated
-- ahead, written before revision 0008 bounded ticks, must not hide the ticks before it). The
-- scheduler computes the due ticks from these database times only and enqueues each with
-- pgqueue.enqueue_tick. Marks each schedule seen (seen_at): a worker that declares it looked.
-- Registering is pgqueue.schedule_sync's, which only roles that may enqueue are granted.
-- From psql:  select * from pgqueue.schedule_state(array['app:Nightly']);
create or replace function pgqueue.schedule_state(p_names text[])
returns table (name text, expression text, timezone text, catch_up integer, has_template boolean,
               now timestamptz, changed_at timestamptz, last_tick timestamptz)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_now timestamptz := clock_timestamp();
begin
    -- One lock order for every worker: no deadlock between them.
    perform 1 from pgqueue.schedules s where s.name = any(p_names) order by s.name for no key update;
    update pgqueue.schedules s set seen_at = v_now where s.name = any(p_names);
    return query
    select s.name, s.expression, s.timezone, s.catch_up, s.template is not null and s.period_seconds is not null,
           v_now, s.changed_at,
           (select max(t.tick) from pgqueue.schedule_ticks t where t.schedule = s.name and t.tick <= v_now)
    from pgqueue.schedules s
    where s.name = any(p_names)
    order by s.name;
end
$$;

comment on function pgqueue.schedule_state(text[]) is
    'pgqueue: the registered form, database clock, change time and last enqueued tick of schedules; marks them seen.';
