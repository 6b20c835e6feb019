-- pgqueue.enqueue(envelope, delay_seconds) -> job id
-- Inserts one job from its envelope. The envelope is the single source of the job's
-- columns: id, queue, priority, tries and retry_until (epoch seconds or null).
-- A job that is available now sends pg_notify('pgqueue', queue); PostgreSQL folds identical
-- notifications of one transaction into one, so enqueueing many jobs into one queue in a
-- transaction wakes workers once. A delayed job wakes nobody on that channel: it sends
-- pg_notify('pgqueue_delayed', queue) instead, on which idle workers only re-read
-- pgqueue.next_due() to sleep until the earliest due job (again one per queue and transaction).
-- From psql:  select pgqueue.enqueue('{"id": "...", "name": "app:Job", "args": {}, ...}'::jsonb);
create or replace function pgqueue.enqueue(p_envelope jsonb, p_delay_seconds double precision default 0)
returns uuid
language plpgsql
as $$
declare
    v_id uuid;
    v_queue text := p_envelope->>'queue';
begin
    if p_delay_seconds is null or p_delay_seconds = 'NaN'::double precision or p_delay_seconds < 0
       or p_delay_seconds = 'Infinity'::double precision then
        raise exception 'pgqueue.enqueue: delay must be a finite number of seconds >= 0, got %', p_delay_seconds
            using errcode = '22023';
    end if;
    insert into pgqueue.jobs (id, queue, priority, envelope, max_tries, retry_until, available_at)
    values ((p_envelope->>'id')::uuid,
            v_queue,
            coalesce((p_envelope->>'priority')::smallint, 0),
            p_envelope,
            (p_envelope->>'tries')::integer,
            to_timestamp((p_envelope->>'retry_until')::double precision),
            clock_timestamp() + make_interval(secs => p_delay_seconds))
    returning id into v_id;
    if p_delay_seconds = 0 then
        perform pg_notify('pgqueue', v_queue);
    else
        perform pg_notify('pgqueue_delayed', v_queue);
    end if;
    return v_id;
end
$$;

comment on function pgqueue.enqueue(jsonb, double precision) is
    'pgqueue: insert one job from its envelope, delayed by p_delay_seconds; notifies the queue when ready now.';
