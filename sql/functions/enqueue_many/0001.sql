-- pgqueue.enqueue_many(envelopes, delays) -> number of jobs inserted
-- Bulk insert in one statement: p_envelopes is a JSON array of envelopes, p_delays an
-- optional array of delays in seconds (same length; null means all ready now).
-- Sends one notification per queue that received a job ready now, however many jobs, and
-- one on channel pgqueue_delayed per queue that received a delayed job.
create or replace function pgqueue.enqueue_many(p_envelopes jsonb, p_delays double precision[] default null)
returns bigint
language plpgsql
as $$
declare
    v_count bigint;
    v_now timestamptz := clock_timestamp();
    v_queue text;
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
        if exists (select 1 from unnest(p_delays) d where d is null or d < 0 or d = 'NaN'::double precision
                                                          or d = 'Infinity'::double precision) then
            raise exception 'pgqueue.enqueue_many: every delay must be a finite number of seconds >= 0'
                using errcode = '22023';
        end if;
    end if;

    insert into pgqueue.jobs (id, queue, priority, envelope, max_tries, retry_until, available_at)
    select (e.value->>'id')::uuid,
           e.value->>'queue',
           coalesce((e.value->>'priority')::smallint, 0),
           e.value,
           (e.value->>'tries')::integer,
           to_timestamp((e.value->>'retry_until')::double precision),
           case when p_delays is null or p_delays[e.ordinality] = 0 then v_now
                else v_now + make_interval(secs => p_delays[e.ordinality]) end
    from jsonb_array_elements(p_envelopes) with ordinality as e(value, ordinality);
    get diagnostics v_count = row_count;

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
