-- pgqueue.adaptive_acked(queues) -> nothing
-- issue 28: adaptive limits, the additive increase. Called by pgqueue.ack with the queue of each
-- job it accepted (one element per job), only when some queue has an adaptive limit. Per adaptive
-- queue: adds the acks to its window; once the window holds as many acks as the current limit, the
-- limit grows by one (never above adaptive_max), the window restarts, and idle workers are woken.
create or replace function pgqueue.adaptive_acked(p_queues text[])
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_grown text;
begin
    -- Lock the rows in name order first: two acks over the same adaptive queues never deadlock.
    perform 1 from pgqueue.queues q
    where q.name = any(p_queues) and q.adaptive_min is not null
    order by q.name
    for update;
    for v_grown in
        with acked as (select a.queue, count(*)::integer as n from unnest(p_queues) a(queue) group by a.queue),
        moved as (
            update pgqueue.queues q
            set concurrency = case when q.adaptive_acks + a.n >= coalesce(q.concurrency, q.adaptive_max)
                                   then least(coalesce(q.concurrency, q.adaptive_max) + 1, q.adaptive_max)
                                   else q.concurrency end,
                adaptive_acks = case when q.adaptive_acks + a.n >= coalesce(q.concurrency, q.adaptive_max) then 0
                                     else q.adaptive_acks + a.n end
            from acked a
            where q.name = a.queue and q.adaptive_min is not null
            returning q.name, q.adaptive_acks = 0 as grown
        )
        select m.name from moved m where m.grown
    loop
        perform pg_notify('pgqueue', v_grown);
    end loop;
end
$$;

comment on function pgqueue.adaptive_acked(text[]) is
    'pgqueue: count acks in adaptive queues'' windows and grow their limits by one per full window (called by pgqueue.ack).';
