-- pgqueue.enqueue_debounced(envelope, key, window_seconds, max_wait_seconds)
--   -> (id, coalesced, available_at)
-- Issue 28: debounce. Dispatches of one key whose window is still open make one job, which runs
-- once the dispatches stop for a whole window (a trailing window), and at the latest
-- max_wait_seconds after the dispatch that asked for it (so a steady stream cannot postpone it
-- for ever; null: no such bound).
--   - No job holds the key: a job is inserted, due window_seconds from now (it is delayed: it
--     sends pg_notify('pgqueue_delayed', queue), as any delayed dispatch).
--   - A job holds the key and its window is open (it is due later than now): that job takes this
--     dispatch's envelope (the latest args and settings win; it keeps its id and created_at) and
--     is due window_seconds from now, but no later than the earliest deadline any dispatch of its
--     window set (each dispatch's time + its max_wait_seconds). coalesced = true, its id returned.
--   - The holder's window has closed (it is due, waiting for a worker): it keeps its envelope and
--     leaves the window (drops its key) and a new job starts a new window.
-- A job holds its key from its dispatch until it is first reserved: the trigger
-- jobs_debounce_reserved drops the key then, so a running job (or one that ran and waits for a
-- retry) is never changed; the next dispatch of the key starts a new window.
-- Race-free: the unique index jobs_debounce_idx lets one waiting job hold a key, and
-- INSERT ... ON CONFLICT DO UPDATE either inserts or updates it, whatever the number of
-- concurrent producers. A call whose key is held by an uncommitted transaction waits for it (on
-- the index entry), then updates its job (committed) or inserts (rolled back). Under REPEATABLE
-- READ or SERIALIZABLE a holder committed after the snapshot gives PostgreSQL's serialization
-- failure (SQLSTATE 40001): run the transaction again.
-- Refused (SQLSTATE 22023, nothing stored): a key that is null or not 1 to 1000 bytes, a window
-- that is not a number of seconds above 0 and at most 315360000 (10 years; NaN, infinity), a
-- max wait that is not null or from the window to 315360000, and any envelope enqueue refuses.
-- The key, window and max wait are also written into the envelope ("debounce_key",
-- "debounce_window", "debounce_max_wait") so SQL and the failure record can show them.
-- From psql:  select * from pgqueue.enqueue_debounced('{"id": "...", ...}'::jsonb, 'reindex:42', 5, 60);
create or replace function pgqueue.enqueue_debounced(p_envelope jsonb, p_key text, p_window_seconds double precision,
                                                     p_max_wait_seconds double precision)
returns table (id uuid, coalesced boolean, available_at timestamptz)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_now timestamptz := clock_timestamp();
    v_envelope jsonb;
    v_problem text;
    v_id uuid;
    v_until timestamptz;
    v_found_id uuid;
    v_due timestamptz;
    v_queue text;
begin
    -- The messages are those of pgqueue/debounce.py (check_debounce).
    if p_key is null then
        raise exception 'pgqueue.enqueue_debounced: a debounce key must be a string, got null' using errcode = '22023';
    end if;
    if octet_length(p_key) not between 1 and 1000 then
        raise exception 'pgqueue.enqueue_debounced: a debounce key must be 1 to 1000 bytes of UTF-8, got %: %',
                        octet_length(p_key), pgqueue.shown(p_key)
            using errcode = '22023';
    end if;
    -- NaN sorts above every number in PostgreSQL, so the upper bounds refuse it too.
    if p_window_seconds is null or not (p_window_seconds > 0 and p_window_seconds <= 315360000) then
        raise exception 'pgqueue.enqueue_debounced: the debounce window must be a finite number of seconds above 0 and at most 315360000 (10 years), got %',
                        coalesce(p_window_seconds::text, 'null')
            using errcode = '22023';
    end if;
    if p_max_wait_seconds is not null
            and not (p_max_wait_seconds >= p_window_seconds and p_max_wait_seconds <= 315360000) then
        raise exception 'pgqueue.enqueue_debounced: the debounce max wait must be a finite number of seconds from the window (%) to 315360000 (10 years), got %',
                        p_window_seconds, p_max_wait_seconds
            using errcode = '22023';
    end if;
    v_problem := pgqueue.envelope_problem(p_envelope);
    if v_problem is not null then
        raise exception 'pgqueue.enqueue_debounced: %', v_problem using errcode = '22023';
    end if;
    v_id := (p_envelope->>'id')::uuid;
    v_envelope := p_envelope || jsonb_build_object('debounce_key', p_key, 'debounce_window', p_window_seconds,
                                                   'debounce_max_wait', p_max_wait_seconds);
    v_until := v_now + make_interval(secs => p_max_wait_seconds);  -- null without a max wait

    for v_attempt in 1..3 loop
        insert into pgqueue.jobs as j (id, queue, priority, envelope, max_tries, retry_until, available_at,
                                       debounce_key, debounce_until, partition)
        values (v_id,
                p_envelope->>'queue',
                coalesce((p_envelope->>'priority')::smallint, 0),
                v_envelope,
                (p_envelope->>'tries')::integer,
                to_timestamp((p_envelope->>'retry_until')::double precision),
                v_now + make_interval(secs => p_window_seconds),
                p_key,
                v_until,
                p_envelope->>'partition')  -- issue 28: its partition, checked by envelope_problem
        on conflict (debounce_key) where debounce_key is not null do update
            set envelope = excluded.envelope || jsonb_build_object('id', j.id),
                queue = excluded.queue,
                priority = excluded.priority,
                max_tries = excluded.max_tries,
                retry_until = excluded.retry_until,
                partition = excluded.partition,
                -- least() skips nulls: the earliest deadline any dispatch of the window set.
                debounce_until = least(j.debounce_until, excluded.debounce_until),
                available_at = least(excluded.available_at, j.debounce_until, excluded.debounce_until)
            where j.available_at > v_now
        returning j.id, j.available_at, j.queue into v_found_id, v_due, v_queue;
        if found then
            perform pg_notify('pgqueue_delayed', v_queue);
            return query select v_found_id, v_found_id <> v_id, v_due;
            return;
        end if;
        -- The holder is due (its window closed): ON CONFLICT locked it, so no worker takes it
        -- meanwhile; it leaves the window with its envelope as it is, and the insert is tried again.
        update pgqueue.jobs j set debounce_key = null, debounce_until = null
        where j.debounce_key = p_key and j.available_at <= v_now;
    end loop;
    raise exception 'pgqueue.enqueue_debounced: debounce key % changed hands 3 times while this call tried to take it',
                    pgqueue.shown(p_key)
        using errcode = '40001',
              hint = 'Run the call again.';
end
$$;

comment on function pgqueue.enqueue_debounced(jsonb, text, double precision, double precision) is
    'pgqueue: dispatch a job debounced by key (a trailing window with an optional max wait); returns the job id, whether it joined an open window, and when it is due.';
