-- pgqueue.record_outcomes(outcome, queues, names, durations, latencies) -> nothing
-- Adds outcomes to the history (pgqueue.job_stats), one per array element: p_outcome is
-- 'succeeded', 'failed', 'retried', 'cancelled' or 'given_back' (an attempt the worker itself
-- interrupted and gave back with its try; revision 0008); p_durations are handler run times and
-- p_latencies queue latencies in seconds (a null array, or null elements, when unknown).
-- Called by ack, release, fail, cancel, reserve and release_interrupted, inside their
-- statements, so history costs no extra round trip. One upsert per (minute, queue, name) group,
-- taken in key order (two writers never wait on each other in opposite orders), on the writing
-- backend's shard of the minute (pid modulo 8), so concurrent workers rarely touch the same row.
create or replace function pgqueue.record_outcomes(p_outcome text, p_queues text[], p_names text[],
                                                   p_durations double precision[], p_latencies double precision[])
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if p_outcome is null or p_outcome not in ('succeeded', 'failed', 'retried', 'cancelled', 'given_back') then
        raise exception 'pgqueue.record_outcomes: outcome must be succeeded, failed, retried, cancelled or given_back, got %',
                        p_outcome
            using errcode = '22023';
    end if;
    if cardinality(p_queues) is null then
        return;
    end if;
    insert into pgqueue.job_stats as s (minute, queue, name, shard, succeeded, failed, retried, cancelled,
                                        given_back, duration_count, duration_sum, duration_max,
                                        latency_count, latency_sum, latency_max)
    select date_trunc('minute', now()), t.queue, coalesce(t.name, '?'), (pg_backend_pid() % 8)::smallint,
           case when p_outcome = 'succeeded' then count(*) else 0 end,
           case when p_outcome = 'failed' then count(*) else 0 end,
           case when p_outcome = 'retried' then count(*) else 0 end,
           case when p_outcome = 'cancelled' then count(*) else 0 end,
           case when p_outcome = 'given_back' then count(*) else 0 end,
           count(t.duration), coalesce(sum(greatest(t.duration, 0)), 0), max(greatest(t.duration, 0)),
           count(t.latency), coalesce(sum(greatest(t.latency, 0)), 0), max(greatest(t.latency, 0))
    from unnest(p_queues, p_names, p_durations, p_latencies) as t(queue, name, duration, latency)
    where t.queue is not null
    group by t.queue, coalesce(t.name, '?')
    order by t.queue, coalesce(t.name, '?')
    on conflict (minute, queue, name, shard) do update
    set succeeded = s.succeeded + excluded.succeeded,
        failed = s.failed + excluded.failed,
        retried = s.retried + excluded.retried,
        cancelled = s.cancelled + excluded.cancelled,
        given_back = s.given_back + excluded.given_back,
        duration_count = s.duration_count + excluded.duration_count,
        duration_sum = s.duration_sum + excluded.duration_sum,
        duration_max = greatest(s.duration_max, excluded.duration_max),
        latency_count = s.latency_count + excluded.latency_count,
        latency_sum = s.latency_sum + excluded.latency_sum,
        latency_max = greatest(s.latency_max, excluded.latency_max);
end
$$;

comment on function pgqueue.record_outcomes(text, text[], text[], double precision[], double precision[]) is
    'pgqueue: add outcomes to the per-minute history pgqueue.job_stats (called by ack, release, fail, cancel, reserve, release_interrupted).';
