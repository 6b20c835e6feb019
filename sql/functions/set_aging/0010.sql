-- pgqueue.set_aging(queue, seconds) -> nothing
-- Issue 28: priority aging for a queue, enforced by pgqueue.reserve for every worker: a ready job's
-- priority counts one level higher per `seconds` it has waited since it became due, never above
-- the queue's highest priority with ready jobs, and jobs are served by that effective priority,
-- then the one due first (see pgqueue.aged_priority). So a low-priority job runs at the latest
-- once (top - its priority) x seconds have passed and the jobs ahead of it at the top, due
-- earlier, are served. seconds: from 0.001 to 31536000 (1 year); null turns aging off.
-- Changed live: the next reservation uses it; idle workers are woken.
-- From psql:  select pgqueue.set_aging('reports', 30);     -- one level per 30 s waited
--             select pgqueue.set_aging('reports', null);   -- strict priorities again
create or replace function pgqueue.set_aging(p_queue text, p_seconds double precision)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
begin
    if v_problem is not null then
        raise exception 'pgqueue.set_aging: %', v_problem using errcode = '22023';
    end if;
    -- NaN sorts above every number in PostgreSQL, so the upper bound refuses it too.
    if p_seconds is not null and not (p_seconds >= 0.001 and p_seconds <= 31536000) then
        raise exception 'pgqueue.set_aging: aging must be from 0.001 to 31536000 seconds (or null for none), got %',
                        p_seconds
            using errcode = '22023';
    end if;
    insert into pgqueue.queues as q (name, aging)
    values (p_queue, make_interval(secs => p_seconds))
    on conflict (name) do update set aging = excluded.aging, updated_at = now();
    perform pg_notify('pgqueue', p_queue);
end
$$;

comment on function pgqueue.set_aging(text, double precision) is
    'pgqueue: set (or clear, with null) a queue''s priority aging: one priority level per this many seconds waited.';
