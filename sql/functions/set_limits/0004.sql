-- pgqueue.set_limits(queue, concurrency, rate_limit, rate_period_seconds) -> nothing
-- Sets a queue's global limits, enforced by pgqueue.reserve for every worker on every host:
--   concurrency  at most this many jobs of the queue reserved at once (null: no limit);
--   rate_limit   at most this many reservations per rate_period_seconds (null: no limit);
--                a token bucket of one token, so any window of T seconds sees at most
--                rate * T + 1 reservations.
-- Changed live: the next reservation uses the new values; idle workers are woken.
-- From psql:  select pgqueue.set_limits('mailer', 3, 100, 1);   -- 3 at once, 100 per second
--             select pgqueue.set_limits('mailer', null, null, null);   -- no limits
create or replace function pgqueue.set_limits(p_queue text, p_concurrency integer, p_rate_limit integer,
                                              p_rate_period_seconds double precision)
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
    insert into pgqueue.queues as q (name, concurrency, rate_limit, rate_period)
    values (p_queue, p_concurrency, p_rate_limit, make_interval(secs => p_rate_period_seconds))
    on conflict (name) do update
        set concurrency = excluded.concurrency, rate_limit = excluded.rate_limit,
            rate_period = excluded.rate_period, updated_at = now();
    perform pg_notify('pgqueue', p_queue);
end
$$;

comment on function pgqueue.set_limits(text, integer, integer, double precision) is
    'pgqueue: set (or clear, with nulls) a queue''s global concurrency and rate limits.';
