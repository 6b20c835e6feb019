-- pgqueue.enqueue_many(envelopes, delays) -> number of jobs inserted
-- Bulk insert in one statement: p_envelopes is a JSON array of envelopes, p_delays an
-- optional array of delays in seconds (same length; null means all ready now), each from 0 to
-- 315360000 (10 years). Every envelope must pass the checks of pgqueue.envelope_problem();
-- the first that does not is refused by its position and problem (SQLSTATE 22023) and
-- nothing is inserted.
-- Sends one notification per queue that received a job ready now, however many jobs, and
-- one on channel pgqueue_delayed per queue that received a delayed job.
create or replace function pgqueue.enqueue_many(p_envelopes jsonb, p_delays double precision[] default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count bigint;
    v_now timestamptz := clock_timestamp();
    v_queue text;
    v_position bigint;
    v_problem text;
begin
    if jsonb_typeof(p_envelopes) is distinct from 'array' then
        raise exception 'pgqueue.enqueue_many: envelopes must be a JSON array, got %', jsonb_typeof(p_envelopes)
            using errcode = '22023';
    end if;
    if p_delays is not null then
        if cardinality(p_delays) <> jsonb_array_length(p_envelopes) then
            raise exception 'pgqueue.enqueue_many: % envelopes but % delays', jsonb_array_length(p_envelopes), cardinality(p_delays)
                using errcode = '22023';
        end if;
        -- NaN sorts above every number in PostgreSQL, so the upper bound refuses it too.
        select d.n, d.delay into v_position, v_problem
        from unnest(p_delays) with ordinality as d(delay, n)
        where d.delay is null or not (d.delay >= 0 and d.delay <= 315360000)
        order by d.n limit 1;
        if found then
            raise exception 'pgqueue.enqueue_many: every delay must be a finite number of seconds from 0 to 315360000 (10 years); delay % is %',
                            v_position, coalesce(v_problem, 'null')
                using errcode = '22023';
        end if;
    end if;

    -- Only envelopes that pass the rules of pgqueue.envelope_problem() (repeated here as one
    -- CASE, which keeps its order: no cast runs before the check that makes it safe) are
    -- inserted; if any was left out, the slow path below names the first and the whole call
    -- fails, so nothing is stored. No extra pass over the array when all are valid.
    insert into pgqueue.jobs (id, queue, priority, envelope, max_tries, retry_until, available_at)
    select (e.value->>'id')::uuid,
           e.value->>'queue',
           coalesce((e.value->>'priority')::smallint, 0),
           e.value,
           (e.value->>'tries')::integer,
           to_timestamp((e.value->>'retry_until')::double precision),
           case when p_delays is null or p_delays[e.ordinality] = 0 then v_now
                else v_now + make_interval(secs => p_delays[e.ordinality]) end
    from jsonb_array_elements(p_envelopes) with ordinality as e(value, ordinality)
    where case
        when jsonb_typeof(e.value) is distinct from 'object' then false
        when jsonb_typeof(e.value->'id') is distinct from 'string'
             or (e.value->>'id') !~ '^[-{}0-9a-fA-F]+$' or length(e.value->>'id') not between 32 and 38 then false
        when jsonb_typeof(e.value->'queue') is distinct from 'string'
             or length(e.value->>'queue') not between 1 and 200
             or (e.value->>'queue') !~ '^[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]([^,\u0001-\u001f\u007f]*[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000])?$' then false
        when jsonb_typeof(e.value->'tries') is distinct from 'number'
             or (e.value->>'tries') !~ '^-?[0-9]+$' or length(e.value->>'tries') > 11 then false
        when (e.value->>'tries')::bigint not between -2147483648 and 2147483647 then false
        when coalesce(jsonb_typeof(e.value->'priority'), 'null') = 'null' then true
        when jsonb_typeof(e.value->'priority') <> 'number' or (e.value->>'priority') !~ '^-?[0-9]+$' or length(e.value->>'priority') > 6 then false
        when (e.value->>'priority')::integer not between -32768 and 32767 then false
        else true end
      and case
        when coalesce(jsonb_typeof(e.value->'retry_until'), 'null') not in ('null', 'number') then false
        else not coalesce(jsonb_path_exists(e.value->'args',
                          'strict $.**{64 to last} ? (@.type() == "object" || @.type() == "array")'), false) end;
    get diagnostics v_count = row_count;
    if v_count <> jsonb_array_length(p_envelopes) then
        select e.ordinality, pgqueue.envelope_problem(e.value) into v_position, v_problem
        from jsonb_array_elements(p_envelopes) with ordinality as e(value, ordinality)
        where pgqueue.envelope_problem(e.value) is not null
        order by e.ordinality limit 1;
        raise exception 'pgqueue.enqueue_many: envelope % of %: %', v_position, jsonb_array_length(p_envelopes),
                        coalesce(v_problem, 'refused by the bulk checks but not by pgqueue.envelope_problem(); please report this')
            using errcode = '22023';
    end if;

    for v_queue in
        select distinct e.value->>'queue'
        from jsonb_array_elements(p_envelopes) with ordinality as e(value, ordinality)
        where p_delays is null or p_delays[e.ordinality] = 0
    loop
        perform pg_notify('pgqueue', v_queue);
    end loop;
    -- Delayed jobs wake nobody up; they only tell idle workers to look at next_due() again,
    -- in case one of them is due before the end of a worker's current sleep.
    if p_delays is not null then
        for v_queue in
            select distinct e.value->>'queue'
            from jsonb_array_elements(p_envelopes) with ordinality as e(value, ordinality)
            where p_delays[e.ordinality] > 0
        loop
            perform pg_notify('pgqueue_delayed', v_queue);
        end loop;
    end if;
    return v_count;
end
$$;

comment on function pgqueue.enqueue_many(jsonb, double precision[]) is
    'pgqueue: bulk insert of a JSON array of envelopes with optional per-job delays; one notification per ready queue.';
