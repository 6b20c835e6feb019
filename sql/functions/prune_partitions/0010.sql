-- pgqueue.prune_partitions(batch) -> rows deleted
-- Issue 28: deletes at most p_batch rows of pgqueue.partitions that hold nothing reserve needs:
-- no override (concurrency, rate and weight all null) and a token bucket that is full again by now
-- (or whose queue no longer has a per-partition rate). reserve_partitions treats a partition
-- without a row as one with a full bucket, so a tenant that is gone leaves no row behind. Run by
-- the workers' maintenance with the ticks and keys; rows another session holds are skipped.
-- Revision 0010: a partition whose concurrency is an adaptive limit that follows the queue's bounds
-- (no bounds of its own) is pruned too once it has no job in the queue: it starts again where every
-- partition starts (the queue's per-partition concurrency).
-- From psql:  select pgqueue.prune_partitions(10000);
create or replace function pgqueue.prune_partitions(p_batch integer)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_now timestamptz := clock_timestamp();
    v_deleted integer;
begin
    if p_batch is null or p_batch < 1 then
        raise exception 'pgqueue.prune_partitions: batch must be >= 1, got %', p_batch using errcode = '22023';
    end if;
    delete from pgqueue.partitions p
    where p.ctid = any (array(
        select o.ctid
        from pgqueue.partitions o
        left join pgqueue.queues q on q.name = o.queue
        where (o.concurrency is null
               or (o.adaptive_limit and o.adaptive_min is null
                   and not exists (select from pgqueue.jobs j where j.queue = o.queue and j.partition = o.partition)))
          and o.rate_limit is null and o.weight is null
          and (q.partition_rate_limit is null or o.rate_tokens is null
               or o.rate_tokens + extract(epoch from v_now - o.rate_refilled_at)::double precision
                                  * q.partition_rate_limit / extract(epoch from q.partition_rate_period)::double precision
                  >= coalesce(q.partition_rate_burst, q.partition_rate_limit))
        limit p_batch
        for update of o skip locked));
    get diagnostics v_deleted = row_count;
    return v_deleted;
end
$$;

comment on function pgqueue.prune_partitions(integer) is
    'pgqueue: delete a batch of pgqueue.partitions rows without an override whose token bucket is full again (workers'' maintenance).';
