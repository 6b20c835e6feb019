-- pgqueue.envelope_problem(envelope) -> why enqueue would refuse this envelope, or null
-- The checks enqueue and enqueue_many make before a job is stored, each with its own message:
-- the envelope is a JSON object; its "id" is a UUID string (32 hex digits, hyphens, braces: the
-- uuid cast then names an id whose layout is still wrong); its "queue" follows the queue-name
-- rule (pgqueue.queue_name_problem); "tries" is an integer (tries < 1 is refused by the CHECK
-- jobs_max_tries_positive); "priority" is null or a smallint; "retry_until" is null or epoch
-- seconds; "partition" is absent or follows pgqueue.partition_problem (issue 28); and "args" nest at most 64 levels deep, the args object itself being level 1
-- (pgqueue/limits.py MAX_ARGS_DEPTH: deeper JSON crashes decoders, Python's json among them).
-- enqueue repeats the same rules inline (a call per job would cost more than the insert),
-- enqueue_many the object, queue-name and depth rules; both call this function only to name
-- the problem. Tests hold them equal.
-- From psql:  select pgqueue.envelope_problem('{"id": "x"}');
create or replace function pgqueue.envelope_problem(p_envelope jsonb)
returns text
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
    v_job text;
    v_problem text;
begin
    if jsonb_typeof(p_envelope) is distinct from 'object' then
        return format('the envelope must be a JSON object, got %s', coalesce(jsonb_typeof(p_envelope), 'null'));
    end if;
    if jsonb_typeof(p_envelope->'id') is distinct from 'string'
       or (p_envelope->>'id') !~ '^[-{}0-9a-fA-F]+$' or length(p_envelope->>'id') not between 32 and 38 then
        return format('the envelope has no valid "id" (a UUID string), got %s',
                      coalesce((p_envelope->'id')::text, 'none'));
    end if;
    v_job := format('job %s: ', p_envelope->>'id');
    if jsonb_typeof(p_envelope->'queue') is distinct from 'string' then
        return v_job || format('"queue" must be a string, got %s', coalesce((p_envelope->'queue')::text, 'none'));
    end if;
    v_problem := pgqueue.queue_name_problem(p_envelope->>'queue');
    if v_problem is not null then
        return v_job || v_problem;
    end if;
    if jsonb_typeof(p_envelope->'tries') is distinct from 'number'
       or (p_envelope->>'tries') !~ '^-?[0-9]+$' or length(p_envelope->>'tries') > 11
       or (p_envelope->>'tries')::bigint not between -2147483648 and 2147483647 then
        return v_job || format('"tries" must be an integer, got %s', coalesce((p_envelope->'tries')::text, 'none'));
    end if;
    if coalesce(jsonb_typeof(p_envelope->'priority'), 'null') <> 'null'
       and (jsonb_typeof(p_envelope->'priority') <> 'number'
            or (p_envelope->>'priority') !~ '^-?[0-9]+$' or length(p_envelope->>'priority') > 6
            or (p_envelope->>'priority')::integer not between -32768 and 32767) then
        return v_job || format('"priority" must be null or an integer from -32768 to 32767, got %s',
                               p_envelope->'priority');
    end if;
    if coalesce(jsonb_typeof(p_envelope->'retry_until'), 'null') not in ('null', 'number') then
        return v_job || format('"retry_until" must be null or epoch seconds (a number), got %s',
                               p_envelope->'retry_until');
    end if;
    if p_envelope ? 'partition' and pgqueue.partition_problem(p_envelope->'partition') is not null then
        return v_job || pgqueue.partition_problem(p_envelope->'partition');  -- issue 28
    end if;
    if jsonb_path_exists(p_envelope->'args', 'strict $.**{64 to last} ? (@.type() == "object" || @.type() == "array")') then
        return v_job || 'args nest deeper than 64 levels of arrays and objects (the args object itself is level 1); '
                     || 'pass flatter data, or store deep data elsewhere and pass its key';
    end if;
    return null;
end
$$;

comment on function pgqueue.envelope_problem(jsonb) is
    'pgqueue: why pgqueue.enqueue would refuse an envelope (not an object, bad id/queue/tries/priority/retry_until, args deeper than 64 levels), or null.';
