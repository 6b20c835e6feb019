-- pgqueue.enqueue(envelope, delay_seconds) -> job id
-- Inserts one job from its envelope. The envelope is the single source of the job's
-- columns: id, queue, priority, tries and retry_until (epoch seconds or null).
-- An envelope pgqueue.envelope_problem() objects to (not an object, no valid id, a bad queue
-- name, tries or priority, args nested deeper than 64 levels) is refused with that problem
-- (SQLSTATE 22023); so is an envelope whose "partition" pgqueue.partition_problem() refuses
-- (issue 28: a plain job, without the key, pays one key look-up); so is a delay outside 0 .. 315360000 seconds (10 years).
-- A job that is available now sends pg_notify('pgqueue', queue); PostgreSQL folds identical
-- notifications of one transaction into one, so enqueueing many jobs into one queue in a
-- transaction wakes workers once. A delayed job wakes nobody on that channel: it sends
-- pg_notify('pgqueue_delayed', queue) instead, on which idle workers only re-read
-- pgqueue.next_due() to sleep until the earliest due job (again one per queue and transaction).
-- From psql:  select pgqueue.enqueue('{"id": "...", "name": "app:Job", "args": {}, ...}'::jsonb);
create or replace function pgqueue.enqueue(p_envelope jsonb, p_delay_seconds double precision default 0)
returns uuid
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_id uuid;
    v_queue text := p_envelope->>'queue';
begin
    -- NaN sorts above every number in PostgreSQL, so the upper bound refuses it too.
    if p_delay_seconds is null or not (p_delay_seconds >= 0 and p_delay_seconds <= 315360000) then
        raise exception 'pgqueue.enqueue: delay must be a finite number of seconds from 0 to 315360000 (10 years), got %',
                        p_delay_seconds
            using errcode = '22023';
    end if;
    -- The rules of pgqueue.envelope_problem(), inline as one CASE (which keeps its order: no
    -- cast runs before the check that makes it safe); calling that function on every enqueue
    -- would cost more than the insert. Only a refused envelope pays for its message.
    if not (case
            when jsonb_typeof(p_envelope) is distinct from 'object' then false
            when jsonb_typeof(p_envelope->'id') is distinct from 'string'
                 or (p_envelope->>'id') !~ '^[-{}0-9a-fA-F]+$' or length(p_envelope->>'id') not between 32 and 38 then false
            when jsonb_typeof(p_envelope->'queue') is distinct from 'string'
                 or length(p_envelope->>'queue') not between 1 and 200
                 or (p_envelope->>'queue') !~ '^[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]([^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]*[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000])?$' then false
            when jsonb_typeof(p_envelope->'tries') is distinct from 'number'
                 or (p_envelope->>'tries') !~ '^-?[0-9]+$' or length(p_envelope->>'tries') > 11 then false
            when (p_envelope->>'tries')::bigint not between -2147483648 and 2147483647 then false
            when coalesce(jsonb_typeof(p_envelope->'priority'), 'null') = 'null' then true
            when jsonb_typeof(p_envelope->'priority') <> 'number' or (p_envelope->>'priority') !~ '^-?[0-9]+$' or length(p_envelope->>'priority') > 6 then false
            when (p_envelope->>'priority')::integer not between -32768 and 32767 then false
            else true end
          and case
            when coalesce(jsonb_typeof(p_envelope->'retry_until'), 'null') not in ('null', 'number') then false
            else not coalesce(jsonb_path_exists(p_envelope->'args',
                              'strict $.**{64 to last} ? (@.type() == "object" || @.type() == "array")'), false) end) then
        raise exception 'pgqueue.enqueue: %', coalesce(pgqueue.envelope_problem(p_envelope),
            'refused by the checks of enqueue but not by pgqueue.envelope_problem(); please report this')
            using errcode = '22023';
    end if;
    if p_envelope ? 'partition' and pgqueue.partition_problem(p_envelope->'partition') is not null then
        raise exception 'pgqueue.enqueue: job %: %', p_envelope->>'id', pgqueue.partition_problem(p_envelope->'partition')
            using errcode = '22023';
    end if;
    insert into pgqueue.jobs (id, queue, priority, envelope, max_tries, retry_until, available_at, partition)
    values ((p_envelope->>'id')::uuid,
            v_queue,
            coalesce((p_envelope->>'priority')::smallint, 0),
            p_envelope,
            (p_envelope->>'tries')::integer,
            to_timestamp((p_envelope->>'retry_until')::double precision),
            clock_timestamp() + make_interval(secs => p_delay_seconds),
            p_envelope->>'partition')
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
