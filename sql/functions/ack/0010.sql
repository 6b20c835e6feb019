-- pgqueue.ack(ids, tokens[, durations, waits, keep]) -> per job, whether the acknowledgement was accepted
-- Deletes finished jobs, many in one statement. A job is deleted only while the caller's
-- token is still the job's token: a holder whose lease expired and was re-reserved by
-- someone else gets acked = false and nothing changes.
-- Each accepted ack counts as succeeded in the history (pgqueue.job_stats). A worker also
-- passes, per job, its handler's run time (p_durations) and the seconds from receiving the
-- reservation to starting the handler (p_waits; the queue latency is then the time from the
-- attempt's due time to its reservation, plus that wait); null when unknown. With p_keep a
-- copy of each acked job goes to pgqueue.completed_jobs in the same statement.
-- Issue 26: an acked job marked has_dependents (jobs wait for it, or a batch counts it) goes on to
-- pgqueue.jobs_ended in the same transaction, which releases its children and counts it in its
-- batch; for every other job the ack reads one more boolean of the row it deletes.
-- issue 28: adaptive limits. A queue with an adaptive limit (pgqueue.set_adaptive_limit) counts
-- its accepted acks; once as many as its current limit were acked since the limit last moved (a
-- window of successes), the limit grows by one (never above its maximum; at most one step per
-- call) and idle workers are woken. Queues without one pay one probe of an index that holds only
-- adaptive queues (empty unless some queue is adaptive): their acks never write pgqueue.queues.
-- Revision 0010: the same probe finds queues with adaptive partitions (pgqueue.set_partition_adaptive_limit);
-- pgqueue.adaptive_acked then also counts the acks of each adaptive partition's window (its row of
-- pgqueue.partitions). The plain path collects the partition of each acked job besides its queue.
-- Locks are taken in one order everywhere: jobs, then a queue's or partition's row, then what
-- waits on the jobs (pgqueue.jobs_ended: dependents, batches), then the history's (pgqueue.job_stats) row.
-- From psql:  select * from pgqueue.ack(array['<job id>']::uuid[], array[<token>]::bigint[]);
create or replace function pgqueue.ack(p_ids uuid[], p_tokens bigint[], p_durations double precision[],
                                       p_waits double precision[], p_keep boolean)
returns table (id uuid, acked boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_ids uuid[];
    v_tokens bigint[];
    v_queues text[];
    v_partitions text[];
    v_names text[];
    v_durations double precision[];
    v_latencies double precision[];
    v_ended uuid[];
begin
    if cardinality(p_ids) is distinct from cardinality(p_tokens) then
        raise exception 'pgqueue.ack: % ids but % tokens', cardinality(p_ids), cardinality(p_tokens)
            using errcode = '22023';
    end if;
    if p_durations is not null and cardinality(p_durations) <> cardinality(p_ids)
       or p_waits is not null and cardinality(p_waits) <> cardinality(p_ids) then
        raise exception 'pgqueue.ack: % ids but % durations and % waits', cardinality(p_ids),
                        cardinality(p_durations), cardinality(p_waits)
            using errcode = '22023';
    end if;
    with done as (
        delete from pgqueue.jobs j
        using unnest(p_ids, p_tokens, p_durations, p_waits) as t(id, token, duration, wait)
        where j.id = t.id and j.token = t.token
        returning j.id, j.token, j.queue, j.partition, j.envelope, j.attempts, j.created_at, j.due_at, j.reserved_at,
                  j.has_dependents, t.duration, extract(epoch from j.reserved_at - j.due_at)::double precision + t.wait as latency
    ),
    kept as (
        insert into pgqueue.completed_jobs (job_id, queue, envelope, attempts, created_at, due_at, reserved_at,
                                            duration, latency)
        select d.id, d.queue, d.envelope, d.attempts, d.created_at, d.due_at, d.reserved_at, d.duration, d.latency
        from done d
        where p_keep
    )
    select array_agg(d.id), array_agg(d.token), array_agg(d.queue), array_agg(d.partition), array_agg(d.envelope->>'name'),
           array_agg(d.duration), array_agg(d.latency), array_agg(d.id) filter (where d.has_dependents)
    into v_ids, v_tokens, v_queues, v_partitions, v_names, v_durations, v_latencies, v_ended
    from done d;
    -- The adaptive windows first: a queue's or partition's row is locked before the history's row,
    -- as pgqueue.backpressure and pgqueue.reserve take them, so an ack never waits on one while
    -- holding the other in the opposite order (a deadlock, which failed a job of tries = 1).
    if v_queues is not null
       and exists (select from pgqueue.queues q where q.adaptive_min is not null or q.partition_adaptive) then
        perform pgqueue.adaptive_acked(v_queues, v_partitions);
    end if;
    -- The same for what waits on these jobs: a batch's row is locked before the history's, as
    -- pgqueue.fail's (through the failed_jobs trigger) is; the ack of one member and the failure
    -- of another deadlocked on one history shard the other way round.
    if v_ended is not null then
        perform pgqueue.jobs_ended(v_ended, 'succeeded');
    end if;
    perform pgqueue.record_outcomes('succeeded', v_queues, v_names, v_durations, v_latencies);
    -- Answer per (id, token) pair as given, so a stale pair never borrows the verdict of
    -- a matching pair for the same job.
    return query
    select t.id, d.id is not null
    from unnest(p_ids, p_tokens) with ordinality as t(id, token, n)
    left join unnest(v_ids, v_tokens) as d(id, token) on d.id = t.id and d.token = t.token
    order by t.n;
end
$$;

comment on function pgqueue.ack(uuid[], bigint[], double precision[], double precision[], boolean) is
    'pgqueue: delete finished jobs whose (id, token) still match, counting them in job_stats; returns acked = false for stale holders.';

-- The call of revisions before 0005 (and of psql users): no durations, no copy.
create or replace function pgqueue.ack(p_ids uuid[], p_tokens bigint[])
returns table (id uuid, acked boolean)
language sql
set search_path = pg_catalog, pg_temp
as $$
    select a.id, a.acked from pgqueue.ack(p_ids, p_tokens, null, null, false) a
$$;

comment on function pgqueue.ack(uuid[], bigint[]) is
    'pgqueue: delete finished jobs whose (id, token) still match; returns acked = false for stale holders.';
