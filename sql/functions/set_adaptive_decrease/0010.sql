-- pgqueue.set_adaptive_decrease(queue, factor) -> nothing
-- issue 28: how deep one backpressure report cuts a queue's adaptive limits (its own,
-- pgqueue.set_adaptive_limit, and its partitions', pgqueue.set_partition_adaptive_limit): a cut
-- leaves floor(limit x factor), at least one less than the limit, never below the minimum.
-- factor: above 0 and below 1; null: the default, 0.9 (Netflix concurrency-limits' AIMDLimit
-- backoff ratio; TCP Reno halves: 0.5, as revision 0009 did). A gentler cut keeps the limit closer
-- to the downstream's capacity; a deeper one gets below a capacity that dropped in fewer reports.
-- From psql:  select pgqueue.set_adaptive_decrease('partner', 0.5);   -- halve, as TCP Reno
create or replace function pgqueue.set_adaptive_decrease(p_queue text, p_factor double precision)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
begin
    if v_problem is not null then
        raise exception 'pgqueue.set_adaptive_decrease: %', v_problem using errcode = '22023';
    end if;
    if p_factor is not null and not (p_factor > 0 and p_factor < 1) then
        raise exception 'pgqueue.set_adaptive_decrease: the factor a cut multiplies the limit by must be above 0 and below 1 (0.9: 10%% less; 0.5: halve), got %',
                        p_factor
            using errcode = '22023';
    end if;
    insert into pgqueue.queues as q (name, adaptive_decrease) values (p_queue, coalesce(p_factor, 0.9))
    on conflict (name) do update set adaptive_decrease = excluded.adaptive_decrease, updated_at = now()
    where q.adaptive_decrease is distinct from excluded.adaptive_decrease;
end
$$;

comment on function pgqueue.set_adaptive_decrease(text, double precision) is
    'pgqueue: the factor a backpressure report multiplies a queue''s adaptive limits by (0 < factor < 1; null: 0.9).';
