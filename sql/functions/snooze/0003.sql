-- pgqueue.snooze(id, token, delay_seconds) -> 'snoozed' | 'not_yours' | 'past_deadline'
-- Puts a reserved job back to run again after p_delay_seconds WITHOUT using up a try: the
-- attempt the reservation counted is given back (attempts - 1) and snoozes + 1 records it.
-- Fenced like release: only the holder of the current token may snooze ('not_yours' else,
-- nothing changed). A snooze that would make the job due after its retry_until deadline is
-- refused ('past_deadline', nothing changed): the handler decides what to do instead.
-- Notifies like release (pgqueue when due now, else pgqueue_delayed).
-- From psql:  select pgqueue.snooze('<job id>', <token>, 300);
create or replace function pgqueue.snooze(p_id uuid, p_token bigint, p_delay_seconds double precision)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_queue text;
    v_due timestamptz;
    v_deadline timestamptz;
begin
    -- NaN sorts above every number in PostgreSQL, so the upper bound refuses it too.
    if p_delay_seconds is null or not (p_delay_seconds >= 0 and p_delay_seconds <= 315360000) then
        raise exception 'pgqueue.snooze: delay must be a finite number of seconds from 0 to 315360000 (10 years), got %',
                        p_delay_seconds
            using errcode = '22023';
    end if;
    v_due := clock_timestamp() + make_interval(secs => p_delay_seconds);
    select j.retry_until into v_deadline from pgqueue.jobs j where j.id = p_id and j.token = p_token for update;
    if not found then
        return 'not_yours';
    end if;
    if v_deadline is not null and v_due > v_deadline then
        return 'past_deadline';
    end if;
    update pgqueue.jobs j
    set token = null, reserved_at = null, available_at = v_due,
        attempts = greatest(j.attempts - 1, 0), snoozes = j.snoozes + 1
    where j.id = p_id and j.token = p_token
    returning j.queue into v_queue;
    if p_delay_seconds = 0 then
        perform pg_notify('pgqueue', v_queue);
    else
        perform pg_notify('pgqueue_delayed', v_queue);
    end if;
    return 'snoozed';
end
$$;

comment on function pgqueue.snooze(uuid, bigint, double precision) is
    'pgqueue: put a reserved job back after a delay without using up a try (fenced by its token; bounded by retry_until).';
