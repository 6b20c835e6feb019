-- pgqueue.enqueue_tick(schedule, tick, envelope) -> job id, or null if the tick was enqueued before
-- Enqueues the job of one tick of a schedule exactly once: the primary key of
-- pgqueue.schedule_ticks on (schedule, tick) with ON CONFLICT DO NOTHING lets the first caller
-- in; every other worker (on any host) gets null and enqueues nothing. A caller that dies
-- before committing leaves no row, so the tick stays free for the next worker to take.
-- From psql:  select pgqueue.enqueue_tick('app:Nightly', '2026-11-30 03:00+01', '{"id": "...", ...}'::jsonb);
create or replace function pgqueue.enqueue_tick(p_schedule text, p_tick timestamptz, p_envelope jsonb)
returns uuid
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_id uuid;
begin
    insert into pgqueue.schedule_ticks (schedule, tick, job_id)
    values (p_schedule, p_tick, (p_envelope->>'id')::uuid)
    on conflict (schedule, tick) do nothing
    returning job_id into v_id;
    if v_id is null then
        return null;
    end if;
    perform pgqueue.enqueue(p_envelope || jsonb_build_object('schedule', p_schedule, 'tick', p_tick), 0);
    return v_id;
end
$$;

comment on function pgqueue.enqueue_tick(text, timestamptz, jsonb) is
    'pgqueue: enqueue the job of one schedule tick exactly once; null when the tick was already enqueued.';
