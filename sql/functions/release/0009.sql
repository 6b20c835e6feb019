-- pgqueue.release(id, token, delay_seconds[, duration, wait[, error]]) -> whether the fence matched
-- Puts a reserved job back, available again after p_delay_seconds. The attempt that was
-- running still counts, and counts as retried in the history (pgqueue.job_stats); a worker
-- passes its handler's run time and the seconds from receiving the reservation to starting
-- the handler (see pgqueue.ack), null when unknown. Notifies the queue when the job is ready at once (channel pgqueue),
-- else tells idle workers when it will be due (channel pgqueue_delayed). The delay must be
-- from 0 to 315360000 seconds (10 years). With p_error (a retry after a failed attempt: an object
-- of "exception", "message", "traceback" and "worker") the attempt joins the job's history
-- (pgqueue.attempt_failures, reason 'retried') in the same transaction.
-- From psql:  select pgqueue.release('<job id>', <token>, 30);
create or replace function pgqueue.release(p_id uuid, p_token bigint, p_delay_seconds double precision,
                                           p_duration double precision, p_wait double precision, p_error jsonb)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_attempts integer;
    v_queue text;
    v_name text;
    v_latency double precision;
begin
    -- NaN sorts above every number in PostgreSQL, so the upper bound refuses it too.
    if p_delay_seconds is null or not (p_delay_seconds >= 0 and p_delay_seconds <= 315360000) then
        raise exception 'pgqueue.release: delay must be a finite number of seconds from 0 to 315360000 (10 years), got %',
                        p_delay_seconds
            using errcode = '22023';
    end if;
    update pgqueue.jobs j
    set token = null, reserved_at = null,
        available_at = clock_timestamp() + make_interval(secs => p_delay_seconds)
    from pgqueue.jobs old
    where j.id = p_id and j.token = p_token and old.id = j.id
    returning j.attempts, j.queue, j.envelope->>'name',
              extract(epoch from old.reserved_at - old.due_at)::double precision + p_wait
    into v_attempts, v_queue, v_name, v_latency;
    if not found then
        return false;
    end if;
    if p_error is not null then
        insert into pgqueue.attempt_failures (job_id, attempt, reason, exception, message, traceback, worker, duration)
        values (p_id, v_attempts, 'retried', p_error->>'exception', coalesce(p_error->>'message', ''),
                p_error->>'traceback', p_error->>'worker', p_duration);
    end if;
    perform pgqueue.record_outcomes('retried', array[v_queue], array[v_name], array[p_duration], array[v_latency]);
    if p_delay_seconds = 0 then
        perform pg_notify('pgqueue', v_queue);
    else
        perform pg_notify('pgqueue_delayed', v_queue);
    end if;
    return true;
end
$$;

comment on function pgqueue.release(uuid, bigint, double precision, double precision, double precision, jsonb) is
    'pgqueue: put a reserved job back after a delay (fenced by its token); the attempt counts, as retried in job_stats, and its error is kept.';

-- The call of revision 0005: no error kept.
create or replace function pgqueue.release(p_id uuid, p_token bigint, p_delay_seconds double precision,
                                           p_duration double precision, p_wait double precision)
returns boolean
language sql
set search_path = pg_catalog, pg_temp
as $$
    select pgqueue.release(p_id, p_token, p_delay_seconds, p_duration, p_wait, null)
$$;

comment on function pgqueue.release(uuid, bigint, double precision, double precision, double precision) is
    'pgqueue: put a reserved job back after a delay (fenced by its token); the attempt counts, as retried in job_stats.';

-- The call of revisions before 0005 (and of psql users): no run time known.
create or replace function pgqueue.release(p_id uuid, p_token bigint, p_delay_seconds double precision default 0)
returns boolean
language sql
set search_path = pg_catalog, pg_temp
as $$
    select pgqueue.release(p_id, p_token, p_delay_seconds, null, null, null)
$$;

comment on function pgqueue.release(uuid, bigint, double precision) is
    'pgqueue: put a reserved job back after a delay (fenced by its token); the attempt counts.';
