-- pgqueue.enqueue_many(envelopes, delays) -> number of jobs inserted
-- Bulk insert in one statement: p_envelopes is a JSON array of envelopes, p_delays an
-- optional array of delays in seconds (same length; null means all ready now), each from 0 to
-- 315360000 (10 years). An envelope that is not a JSON object, has a bad queue name or args
-- nested deeper than 64 levels or a bad "partition" (issue 28) is refused by its position and problem (SQLSTATE 22023), and
-- nothing is inserted; other malformed fields fail the insert (NOT NULL, cast, CHECK).
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

    -- Only envelopes that are JSON objects, whose queue name follows the rule and whose args
    -- nest at most 64 levels are inserted; if any was left out, the slow path below names the
    -- first (pgqueue.envelope_problem) and the whole call fails, so nothing is stored, with no
    -- extra pass over the array when all are valid. The other checks of envelope_problem are
    -- left to the insert itself (a missing id or tries violates NOT NULL, a malformed one fails
    -- its cast, tries < 1 the CHECK): checking them here too cost 3 us per envelope, a third
    -- of the bulk insert, for a nicer message in a case the Python producer already refuses.
    insert into pgqueue.jobs (id, queue, priority, envelope, max_tries, retry_until, available_at, partition)
    select (e.value->>'id')::uuid,
           e.value->>'queue',
           coalesce((e.value->>'priority')::smallint, 0),
           e.value,
           (e.value->>'tries')::integer,
           to_timestamp((e.value->>'retry_until')::double precision),
           case when p_delays is null or p_delays[e.ordinality] = 0 then v_now
                else v_now + make_interval(secs => p_delays[e.ordinality]) end,
           e.value->>'partition'
    from jsonb_array_elements(p_envelopes) with ordinality as e(value, ordinality)
    where jsonb_typeof(e.value) = 'object'
      and length(e.value->>'queue') between 1 and 200
      and (e.value->>'queue') ~ '^[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]([^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]*[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000])?$'
      and not coalesce(jsonb_path_exists(e.value->'args',
                       'strict $.**{64 to last} ? (@.type() == "object" || @.type() == "array")'), false)
      -- issue 28: a partition follows its rule (a plain job pays one key look-up)
      and (not (e.value ? 'partition') or pgqueue.partition_problem(e.value->'partition') is null);
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
