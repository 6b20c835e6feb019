-- pgqueue.release(id, token, delay_seconds) -> whether the fence matched
-- Puts a reserved job back, available again after p_delay_seconds. The attempt that was
-- running still counts. Notifies the queue when the job is ready at once (channel pgqueue),
-- else tells idle workers when it will be due (channel pgqueue_delayed).
-- From psql:  select pgqueue.release('<job id>', <token>, 30);
create or replace function pgqueue.release(p_id uuid, p_token bigint, p_delay_seconds double precision default 0)
returns boolean
language plpgsql
as $$
declare
    v_queue text;
begin
    if p_delay_seconds is null or p_delay_seconds = 'NaN'::double precision or p_delay_seconds < 0
       or p_delay_seconds = 'Infinity'::double precision then
        raise exception 'pgqueue.release: delay must be a finite number of seconds >= 0, got %', p_delay_seconds
            using errcode = '22023';
    end if;
    update pgqueue.jobs j
    set token = null, reserved_at = null,
        available_at = clock_timestamp() + make_interval(secs => p_delay_seconds)
    where j.id = p_id and j.token = p_token
    returning j.queue into v_queue;
    if not found then
        return false;
    end if;
    if p_delay_seconds = 0 then
        perform pg_notify('pgqueue', v_queue);
    else
        perform pg_notify('pgqueue_delayed', v_queue);
    end if;
    return true;
end
$$;

comment on function pgqueue.release(uuid, bigint, double precision) is
    'pgqueue: put a reserved job back after a delay (fenced by its token); the attempt counts.';
