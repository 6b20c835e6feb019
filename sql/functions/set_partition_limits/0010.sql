-- pgqueue.set_partition_limits(queue, concurrency, rate_limit, rate_period_seconds, burst, fair) -> nothing
-- Issue 28: sets the limits every partition of a queue gets, enforced by pgqueue.reserve for every
-- worker on every host (jobs.partition; jobs without a partition are not limited by them):
--   concurrency  at most this many jobs of one partition reserved at once (null: no limit);
--   rate_limit   at most this many reservations of one partition per rate_period_seconds (null:
--                no limit): a token bucket per partition, of capacity burst (null: the rate per
--                period), as pgqueue.set_limits does for the queue;
--   fair         serve the queue's partitions in turn even without limits (weighted round robin,
--                weights from pgqueue.set_partition_limit; a queue with any per-partition limit or
--                override is served so anyway).
-- The queue's own limits (pgqueue.set_limits) are kept and still apply to the queue as a whole.
-- Changed live: the next reservation uses the new values; idle workers are woken.
-- Revision 0010: while the queue's partitions have adaptive bounds (pgqueue.set_partition_adaptive_limit
-- with a null partition), concurrency is where a partition without a row starts, clamped into them
-- (null: kept), and the queue stays served by partition.
-- From psql:  select pgqueue.set_partition_limits('orders', 2, 10, 1);     -- 2 at once, 10/s per partition
--             select pgqueue.set_partition_limits('orders', null, null, null);   -- none
create or replace function pgqueue.set_partition_limits(p_queue text, p_concurrency integer, p_rate_limit integer,
                                                        p_rate_period_seconds double precision,
                                                        p_burst integer default null, p_fair boolean default false)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_problem text := pgqueue.queue_name_problem(p_queue);
begin
    if v_problem is not null then
        raise exception 'pgqueue.set_partition_limits: %', v_problem using errcode = '22023';
    end if;
    v_problem := pgqueue.partition_limits_problem(p_concurrency, p_rate_limit, p_rate_period_seconds, p_burst, 1);
    if v_problem is not null then
        raise exception 'pgqueue.set_partition_limits: %', v_problem using errcode = '22023';
    end if;
    insert into pgqueue.queues as q (name, partition_concurrency, partition_rate_limit, partition_rate_period,
                                     partition_rate_burst, partition_fair, partitioned)
    values (p_queue, p_concurrency, p_rate_limit, make_interval(secs => p_rate_period_seconds), p_burst,
            coalesce(p_fair, false),
            p_concurrency is not null or p_rate_limit is not null or coalesce(p_fair, false)
            or exists (select 1 from pgqueue.partitions p where p.queue = p_queue
                       and (p.concurrency is not null or p.rate_limit is not null or p.weight is not null)))
    on conflict (name) do update
        set partition_concurrency = case when q.partition_adaptive_min is null then excluded.partition_concurrency
                                         else least(greatest(coalesce(excluded.partition_concurrency,
                                                                      q.partition_concurrency, q.partition_adaptive_min),
                                                             q.partition_adaptive_min), q.partition_adaptive_max) end,
            partition_rate_limit = excluded.partition_rate_limit,
            partition_rate_period = excluded.partition_rate_period,
            partition_rate_burst = excluded.partition_rate_burst,
            partition_fair = excluded.partition_fair, partitioned = excluded.partitioned or q.partition_adaptive_min is not null,
            updated_at = now();
    perform pg_notify('pgqueue', p_queue);
end
$$;

comment on function pgqueue.set_partition_limits(text, integer, integer, double precision, integer, boolean) is
    'pgqueue: set (or clear, with nulls) the concurrency and rate limits every partition of a queue gets, and fair shares.';
