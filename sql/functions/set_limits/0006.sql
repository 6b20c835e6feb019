-- pgqueue.set_limits(queue, concurrency, rate_limit, rate_period_seconds, burst) -> nothing
-- Sets a queue's global limits, enforced by pgqueue.reserve for every worker on every host:
--   concurrency  at most this many jobs of the queue reserved at once (null: no limit);
--   rate_limit   at most this many reservations per rate_period_seconds (null: no limit),
--                a token bucket refilled at that rate;
--   burst        the bucket's capacity: the most reservations granted at once after a quiet
--                spell (null: the rate per period, e.g. 100 for 100 per second). One
--                reservation takes up to min(free slots, tokens) jobs, and any window of
--                T seconds sees at most rate * T + burst reservations. Needs a rate_limit.
-- A queue that gets a rate limit starts with a full bucket; changing a limit keeps the tokens
-- the bucket holds (at most the new capacity).
-- Changed live: the next reservation uses the new values; idle workers are woken.
-- From psql:  select pgqueue.set_limits('mailer', 3, 100, 1);   -- 3 at once, 100 per second
--             select pgqueue.set_limits('mailer', null, 100, 1, 10);   -- 100/s, at most 10 at once
--             select pgqueue.set_limits('mailer', null, null, null);   -- no limits
create or replace function pgqueue.set_limits(p_queue text, p_concurrency integer, p_rate_limit integer,
                                              p_rate_period_seconds double precision,
                                              p_burst integer default null)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
begin
    if v_problem is not null then
        raise exception 'pgqueue.set_limits: %', v_problem using errcode = '22023';
    end if;
    if p_concurrency is not null and p_concurrency < 1 then
        raise exception 'pgqueue.set_limits: concurrency must be >= 1 (or null for no limit), got %', p_concurrency
            using errcode = '22023';
    end if;
    if (p_rate_limit is null) <> (p_rate_period_seconds is null) then
        raise exception 'pgqueue.set_limits: give both rate_limit and rate_period_seconds, or neither'
            using errcode = '22023';
    end if;
    if p_rate_limit is not null and (p_rate_limit < 1 or not (p_rate_period_seconds >= 0.001
                                                                 and p_rate_period_seconds <= 31536000)) then
        raise exception 'pgqueue.set_limits: rate must be >= 1 per period of 0.001 to 31536000 seconds, got % per %',
                        p_rate_limit, p_rate_period_seconds
            using errcode = '22023';
    end if;
    if p_burst is not null and p_rate_limit is null then
        raise exception 'pgqueue.set_limits: burst % needs a rate limit (it is the rate''s bucket capacity)', p_burst
            using errcode = '22023';
    end if;
    if p_burst is not null and p_burst < 1 then
        raise exception 'pgqueue.set_limits: burst must be >= 1 (or null for the rate per period), got %', p_burst
            using errcode = '22023';
    end if;
    insert into pgqueue.queues as q (name, concurrency, rate_limit, rate_period, rate_burst, rate_tokens)
    values (p_queue, p_concurrency, p_rate_limit, make_interval(secs => p_rate_period_seconds), p_burst,
            coalesce(p_burst, p_rate_limit, 1))
    on conflict (name) do update
        set concurrency = excluded.concurrency, rate_limit = excluded.rate_limit,
            rate_period = excluded.rate_period, rate_burst = excluded.rate_burst,
            -- A new rate limit starts with a full bucket; a changed one keeps its tokens.
            rate_tokens = case when q.rate_limit is null then excluded.rate_tokens else q.rate_tokens end,
            rate_refilled_at = case when q.rate_limit is null then now() else q.rate_refilled_at end,
            updated_at = now();
    perform pg_notify('pgqueue', p_queue);
end
$$;

comment on function pgqueue.set_limits(text, integer, integer, double precision, integer) is
    'pgqueue: set (or clear, with nulls) a queue''s global concurrency and rate limits and the rate''s burst.';
