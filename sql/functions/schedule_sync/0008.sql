-- pgqueue.schedule_sync(names, expressions, timezones, catch_ups, periods, templates)
--   -> (name, expression, timezone, catch_up, has_template, now, changed_at, last_tick)
-- Registers schedules, one array element per schedule, and returns what
-- pgqueue.schedule_state returns for them. Each has:
--   name        the job name, 1 to 1000 characters, given once;
--   expression  'every <n>s' (n from 1 to 31536000: ticks at multiples of n seconds since the
--               Unix epoch) or a cron expression of 5 fields;
--   timezone    the IANA name the cron expression is read in (the database does not read it);
--   catch_up    1 to 1000: the most missed ticks enqueued after downtime;
--   period      the most seconds between two ticks: n for 'every <n>s'; for cron the longest
--               gap between two of its ticks, 60 to 3155760000 (100 years), as computed by
--               the registering worker (pgqueue/schedules.py);
--   template    the envelope of its jobs without the id: a JSON object pgqueue.envelope_problem
--               accepts once an id is added, as pgqueue.enqueue checks a dispatch, whose "name"
--               is the schedule's name.
-- pgqueue.enqueue_tick builds every tick's job from the template: a role that may register a
-- template may enqueue that job, again and again. So grant this function only to roles that
-- may enqueue anyway (sql/roles/least_privilege.sql: pgqueue_producer), never to workers alone.
-- The change time moves when the expression, timezone or catch-up changes (the scheduler counts
-- ticks from then on); period and template are replaced as given. A refused element (SQLSTATE
-- 22023, naming the schedule and the problem) registers nothing.
-- From psql:  select * from pgqueue.schedule_sync(array['app:Nightly'], array['0 3 * * *'], array['Europe/Paris'],
--               array[1], array[90000]::bigint[], array['{"name": "app:Nightly", "args": {}, "queue": "default", "tries": 3}']::jsonb[]);
create or replace function pgqueue.schedule_sync(p_names text[], p_expressions text[], p_timezones text[],
                                                 p_catch_ups integer[], p_periods bigint[], p_templates jsonb[])
returns table (name text, expression text, timezone text, catch_up integer, has_template boolean,
               now timestamptz, changed_at timestamptz, last_tick timestamptz)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count integer := coalesce(cardinality(p_names), 0);
    v_name text;
    v_expression text;
    v_every bigint;
    v_problem text;
    v_where text;
begin
    if coalesce(cardinality(p_expressions), 0) <> v_count or coalesce(cardinality(p_timezones), 0) <> v_count
       or coalesce(cardinality(p_catch_ups), 0) <> v_count or coalesce(cardinality(p_periods), 0) <> v_count
       or coalesce(cardinality(p_templates), 0) <> v_count then
        raise exception 'pgqueue.schedule_sync: give one expression, timezone, catch-up, period and template per schedule name; got %, %, %, %, % for % names',
                        coalesce(cardinality(p_expressions), 0), coalesce(cardinality(p_timezones), 0),
                        coalesce(cardinality(p_catch_ups), 0), coalesce(cardinality(p_periods), 0),
                        coalesce(cardinality(p_templates), 0), v_count
            using errcode = '22023';
    end if;
    for i in 1 .. v_count loop
        v_name := p_names[i];
        v_expression := p_expressions[i];
        if v_name is null or length(v_name) not between 1 and 1000 then
            raise exception 'pgqueue.schedule_sync: a schedule name must be 1 to 1000 characters, got %',
                            coalesce(length(v_name)::text || ' characters', 'null')
                using errcode = '22023';
        end if;
        if array_position(p_names, v_name) <> i then
            raise exception 'pgqueue.schedule_sync: schedule % is given twice', quote_literal(v_name)
                using errcode = '22023';
        end if;
        v_where := format('pgqueue.schedule_sync: schedule %L: ', v_name);
        if v_expression ~ '^every [0-9]{1,9}s$' then
            v_every := substr(v_expression, 7, length(v_expression) - 7)::bigint;  -- the n of 'every <n>s'
            if v_every not between 1 and 31536000 then
                raise exception '%the interval of % must be 1 to 31536000 seconds (365 days)', v_where, quote_literal(v_expression)
                    using errcode = '22023';
            end if;
            if p_periods[i] is distinct from v_every then
                raise exception '%the period of % is % seconds, got %', v_where, quote_literal(v_expression), v_every,
                                coalesce(p_periods[i]::text, 'null')
                    using errcode = '22023';
            end if;
        elsif v_expression is null or length(v_expression) > 200 or v_expression !~ '^\s*\S+(\s+\S+){4}\s*$' then
            raise exception '%expression % is neither ''every <n>s'' nor a cron expression of 5 fields',
                            v_where, coalesce(quote_literal(left(v_expression, 200)), 'null')
                using errcode = '22023';
        elsif p_periods[i] is null or p_periods[i] not between 60 and 3155760000 then
            raise exception '%the period of cron expression % must be 60 to 3155760000 seconds, got %',
                            v_where, quote_literal(v_expression), coalesce(p_periods[i]::text, 'null')
                using errcode = '22023';
        end if;
        if p_timezones[i] is null or length(p_timezones[i]) not between 1 and 200 then
            raise exception '%the timezone must be 1 to 200 characters, got %', v_where,
                            coalesce(quote_literal(left(p_timezones[i], 200)), 'null')
                using errcode = '22023';
        end if;
        if p_catch_ups[i] is null or p_catch_ups[i] not between 1 and 1000 then
            raise exception '%catch_up must be 1 to 1000, got %', v_where, coalesce(p_catch_ups[i]::text, 'null')
                using errcode = '22023';
        end if;
        -- The rule a dispatch meets, on the template with an id, as every tick will have one.
        v_problem := pgqueue.envelope_problem(
            p_templates[i] || jsonb_build_object('id', '00000000-0000-7000-8000-000000000000'));
        if v_problem is null and p_templates[i]->>'name' is distinct from v_name then
            v_problem := format('its "name" must be the schedule''s, got %s', coalesce(p_templates[i]->'name', 'null'));
        end if;
        if v_problem is not null then
            raise exception '%the template of its jobs is refused: %', v_where, v_problem
                using errcode = '22023';
        end if;
    end loop;

    insert into pgqueue.schedules as s (name, expression, timezone, catch_up, period_seconds, template,
                                        changed_at, seen_at)
    select d.name, d.expression, d.timezone, d.catch_up, d.period, d.template - 'id' - 'schedule' - 'tick',
           clock_timestamp(), clock_timestamp()
    from unnest(p_names, p_expressions, p_timezones, p_catch_ups, p_periods, p_templates)
         as d(name, expression, timezone, catch_up, period, template)
    order by d.name  -- one lock order for every caller: no deadlock between them
    on conflict on constraint schedules_pkey do update
        set expression = excluded.expression, timezone = excluded.timezone, catch_up = excluded.catch_up,
            period_seconds = excluded.period_seconds, template = excluded.template,
            changed_at = case when (s.expression, s.timezone, s.catch_up)
                                   is distinct from (excluded.expression, excluded.timezone, excluded.catch_up)
                              then excluded.changed_at else s.changed_at end,
            seen_at = excluded.seen_at;
    return query select * from pgqueue.schedule_state(p_names);
end
$$;

comment on function pgqueue.schedule_sync(text[], text[], text[], integer[], bigint[], jsonb[]) is
    'pgqueue: register schedules with their period and job template (roles that may enqueue only); returns their state.';
