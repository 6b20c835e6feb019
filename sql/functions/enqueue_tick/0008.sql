-- pgqueue.enqueue_tick(schedule, tick) -> job id, or null if the tick was enqueued before
-- Enqueues the job of one tick of a registered schedule exactly once. The caller chooses the
-- tick and nothing else: the job is built here from the template registered with the schedule
-- (pgqueue.schedule_sync), with a fresh id (a UUID version 7, as a dispatch makes) and the
-- schedule and tick added, and goes through pgqueue.enqueue. Only a tick the schedule can have
-- is taken, by the database clock:
--   aligned     'every <n>s': a multiple of n seconds since the Unix epoch; cron: a whole minute;
--   not early   at most 5 s after now;
--   not stale   at least now - catch_up * period - 60 s (the catch-up window, and a minute for a
--               scheduler slow between reading the clock and enqueueing);
--   current     after the schedule took its current form (changed_at).
-- Anything else, an unknown schedule, or one registered before revision 0008 without a template,
-- is refused (SQLSTATE 22023, naming the schedule and the tick) and stores nothing. The primary
-- key of pgqueue.schedule_ticks on (schedule, tick) with ON CONFLICT DO NOTHING lets the first
-- caller in; every other worker (on any host) gets null and enqueues nothing. A caller that dies
-- before committing leaves no row, so the tick stays free for the next worker to take.
-- From psql:  select pgqueue.enqueue_tick('app:Nightly', '2026-11-30 03:00+01');
create or replace function pgqueue.enqueue_tick(p_schedule text, p_tick timestamptz)
returns uuid
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_schedule pgqueue.schedules%rowtype;
    v_now timestamptz := clock_timestamp();
    v_now_epoch numeric := extract(epoch from v_now);
    v_epoch numeric;
    v_step bigint;
    v_random text;
    v_id uuid;
begin
    select * into v_schedule from pgqueue.schedules s where s.name = p_schedule;
    if not found then
        raise exception 'pgqueue.enqueue_tick: no schedule named % is registered (pgqueue.schedule_sync registers one, with the template of its jobs)',
                        coalesce(quote_literal(p_schedule), 'null')
            using errcode = '22023';
    end if;
    if v_schedule.template is null or v_schedule.period_seconds is null then
        raise exception 'pgqueue.enqueue_tick: schedule % was registered before revision 0008, without the template of its jobs, and does not tick until registered again',
                        quote_literal(p_schedule)
            using errcode = '22023',
                  hint = 'A worker whose role may call pgqueue.schedule_sync registers it when it starts; '
                         'or run `pgqueue schedule:sync --app <module>` as such a role (pgqueue_producer, or the owner).';
    end if;
    if p_tick is null or not isfinite(p_tick) then
        raise exception 'pgqueue.enqueue_tick: schedule %: the tick must be a finite time, got %',
                        quote_literal(p_schedule), coalesce(p_tick::text, 'null')
            using errcode = '22023';
    end if;
    v_epoch := extract(epoch from p_tick);
    v_step := case when v_schedule.expression ~ '^every [0-9]+s$' then v_schedule.period_seconds else 60 end;
    if v_epoch % v_step <> 0 then
        raise exception 'pgqueue.enqueue_tick: schedule % (%) has no tick at %: its ticks are at multiples of % seconds since the Unix epoch',
                        quote_literal(p_schedule), v_schedule.expression, p_tick, v_step
            using errcode = '22023';
    end if;
    if v_epoch > v_now_epoch + 5 then
        raise exception 'pgqueue.enqueue_tick: schedule %: tick % is in the future (the database clock says %)',
                        quote_literal(p_schedule), p_tick, v_now
            using errcode = '22023';
    end if;
    if v_epoch < v_now_epoch - v_schedule.catch_up::numeric * v_schedule.period_seconds - 60 then
        raise exception 'pgqueue.enqueue_tick: schedule %: tick % is older than its catch-up window (% tick(s) of at most % s before %)',
                        quote_literal(p_schedule), p_tick, v_schedule.catch_up, v_schedule.period_seconds, v_now
            using errcode = '22023';
    end if;
    if p_tick <= v_schedule.changed_at then
        raise exception 'pgqueue.enqueue_tick: schedule %: tick % is not after the schedule took its current form (%)',
                        quote_literal(p_schedule), p_tick, v_schedule.changed_at
            using errcode = '22023';
    end if;
    -- A UUID version 7: the time in milliseconds, then random bits (and the variant) of a v4.
    v_random := replace(gen_random_uuid()::text, '-', '');
    v_id := (lpad(to_hex(floor(v_now_epoch * 1000)::bigint), 12, '0') || '7' || substr(v_random, 14, 3)
             || substr(v_random, 17))::uuid;
    insert into pgqueue.schedule_ticks (schedule, tick, job_id)
    values (p_schedule, p_tick, v_id)
    on conflict (schedule, tick) do nothing
    returning job_id into v_id;
    if v_id is null then
        return null;
    end if;
    perform pgqueue.enqueue(v_schedule.template || jsonb_build_object('id', v_id, 'schedule', p_schedule,
                                                                      'tick', p_tick), 0);
    return v_id;
end
$$;

comment on function pgqueue.enqueue_tick(text, timestamptz) is
    'pgqueue: enqueue the job of one tick of a registered schedule, built from its template, exactly once; null when enqueued before.';
