-- issue 27: pgqueue.workflow_wait(id, token, seq, name, kind, signal, seconds) -> (outcome, payload)
-- The seq-th step of a workflow waits: kind 'sleep' until p_seconds from its first call, kind
-- 'signal' for the oldest unconsumed signal named p_signal (at most p_seconds; null: no timeout).
-- One fenced statement ('not_yours': nothing changed) that records the wait at its first call and
-- then either ends it or parks the workflow:
--   'done'      the sleep is over, or a signal was consumed (payload: its payload; the step keeps it);
--   'timed_out' the signal did not come before the timeout (recorded: every replay times out too);
--   'parked'    the job is put back without using up a try, as pgqueue.snooze does (token cleared:
--               no lease, no worker slot), due at the wake time, or at pgqueue.never() for a wait
--               without a timeout; pgqueue.signal makes it due at once when the awaited signal comes;
--   'conflict'  another step holds that seq or name (the code changed between runs).
-- The job's row is locked first, so a signal sent concurrently is either seen here or, sent after,
-- finds the wait recorded and wakes the job.
-- From psql:  select * from pgqueue.workflow_wait('<job id>', <token>, 3, 'approved', 'signal', 'approved', 172800);
create or replace function pgqueue.workflow_wait(p_id uuid, p_token bigint, p_seq integer, p_name text, p_kind text,
                                                 p_signal text, p_seconds double precision)
returns table (outcome text, payload jsonb)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_step pgqueue.workflow_steps;
    v_signal bigint;
    v_payload jsonb;
    v_queue text;
begin
    if p_kind is null or p_kind not in ('sleep', 'signal') or (p_kind = 'signal') <> (p_signal is not null)
       or (p_kind = 'sleep' and p_seconds is null)
       or p_seconds is not null and not (p_seconds >= 0 and p_seconds <= 315360000) then
        raise exception 'pgqueue.workflow_wait: a sleep takes seconds, a signal wait a signal name (and seconds or null), seconds from 0 to 315360000; got kind %, signal %, seconds %',
                        coalesce(p_kind, 'null'), coalesce(p_signal, 'null'), p_seconds
            using errcode = '22023';
    end if;
    perform 1 from pgqueue.jobs j where j.id = p_id and j.token = p_token for update;
    if not found then
        return query select 'not_yours'::text, null::jsonb;
        return;
    end if;
    select * into v_step from pgqueue.workflow_steps s where s.job_id = p_id and s.seq = p_seq;
    if not found then
        if exists (select 1 from pgqueue.workflow_steps s where s.job_id = p_id and s.name = p_name) then
            return query select 'conflict'::text, null::jsonb;
            return;
        end if;
        insert into pgqueue.workflow_steps (job_id, seq, name, kind, state, signal, wake_at)
        values (p_id, p_seq, p_name, p_kind, 'waiting', p_signal, clock_timestamp() + make_interval(secs => p_seconds))
        returning * into v_step;
    elsif v_step.name <> p_name or v_step.kind <> p_kind then
        return query select 'conflict'::text, null::jsonb;
        return;
    end if;
    if v_step.state = 'succeeded' then
        return query select 'done'::text, v_step.result;
        return;
    elsif v_step.state = 'timed_out' then
        return query select 'timed_out'::text, null::jsonb;
        return;
    end if;
    if p_kind = 'signal' then
        select g.id, g.payload into v_signal, v_payload
        from pgqueue.workflow_signals g
        where g.job_id = p_id and g.name = p_signal and g.consumed_seq is null
        order by g.id limit 1
        for update;
        if found then
            update pgqueue.workflow_signals g set consumed_seq = p_seq where g.id = v_signal;
            update pgqueue.workflow_steps s set state = 'succeeded', result = v_payload, ended_at = clock_timestamp()
            where s.job_id = p_id and s.seq = p_seq;
            return query select 'done'::text, v_payload;
            return;
        end if;
    end if;
    if v_step.wake_at is not null and v_step.wake_at <= clock_timestamp() then
        update pgqueue.workflow_steps s
        set state = case when p_kind = 'sleep' then 'succeeded' else 'timed_out' end, ended_at = clock_timestamp()
        where s.job_id = p_id and s.seq = p_seq;
        return query select case when p_kind = 'sleep' then 'done' else 'timed_out' end, null::jsonb;
        return;
    end if;
    update pgqueue.jobs j
    set token = null, reserved_at = null, available_at = coalesce(v_step.wake_at, pgqueue.never()),
        attempts = greatest(j.attempts - 1, 0), snoozes = j.snoozes + 1
    where j.id = p_id and j.token = p_token
    returning j.queue into v_queue;
    if v_step.wake_at is not null then
        perform pg_notify('pgqueue_delayed', v_queue);
    end if;
    return query select 'parked'::text, null::jsonb;
end
$$;

comment on function pgqueue.workflow_wait(uuid, bigint, integer, text, text, text, double precision) is
    'pgqueue: a workflow''s durable sleep or signal wait: ends it, or parks the job without a lease or a try (issue 27).';
