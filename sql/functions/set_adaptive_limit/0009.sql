-- pgqueue.set_adaptive_limit(queue, min, max) -> nothing
-- issue 28: adaptive limits. Makes a queue's concurrency limit (pgqueue.queues.concurrency, the one
-- pgqueue.reserve enforces) move AIMD-style between p_min and p_max, decided by the outcome functions
-- alone (no leader):
--   pgqueue.backpressure (a handler said the downstream is overloaded) halves it, never below p_min;
--     backpressure from jobs reserved before the last cut does not cut again (they were admitted
--     under the old limit: one cut per overload, as TCP halves once per window);
--   pgqueue.ack raises it by one once as many jobs as the current limit were acked since it last
--     moved (one window of successes), never above p_max.
-- The limit starts at the queue's current concurrency limit, clamped into [p_min, p_max], or at
-- p_min when the queue has none. Both null: adaptive off, the limit stays where it is (a fixed one).
-- Changed live; idle workers are woken.
-- From psql:  select pgqueue.set_adaptive_limit('mailer', 2, 50);
--             select pgqueue.set_adaptive_limit('mailer', null, null);   -- off, keep the current limit
create or replace function pgqueue.set_adaptive_limit(p_queue text, p_min integer, p_max integer)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
begin
    if v_problem is not null then
        raise exception 'pgqueue.set_adaptive_limit: %', v_problem using errcode = '22023';
    end if;
    if (p_min is null) <> (p_max is null) then
        raise exception 'pgqueue.set_adaptive_limit: give both min and max (or neither, to turn adaptive off), got % and %',
                        p_min, p_max
            using errcode = '22023';
    end if;
    if p_min is not null and (p_min < 1 or p_max < p_min) then
        raise exception 'pgqueue.set_adaptive_limit: need 1 <= min <= max, got min % and max %', p_min, p_max
            using errcode = '22023';
    end if;
    insert into pgqueue.queues as q (name, concurrency, adaptive_min, adaptive_max)
    values (p_queue, p_min, p_min, p_max)
    on conflict (name) do update
        set concurrency = case when excluded.adaptive_min is null then q.concurrency
                               else least(greatest(coalesce(q.concurrency, excluded.adaptive_min),
                                                   excluded.adaptive_min), excluded.adaptive_max) end,
            adaptive_min = excluded.adaptive_min, adaptive_max = excluded.adaptive_max,
            adaptive_acks = 0, adaptive_cut_at = null, updated_at = now();
    perform pg_notify('pgqueue', p_queue);
end
$$;

comment on function pgqueue.set_adaptive_limit(text, integer, integer) is
    'pgqueue: let a queue''s concurrency limit move AIMD-style within [min, max] (halved by backpressure, +1 per window of acks); nulls: off.';
