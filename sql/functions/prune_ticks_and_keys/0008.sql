-- pgqueue.prune_ticks_and_keys(batch) -> (ticks_deleted, keys_deleted)
-- Deletes at most p_batch rows of pgqueue.schedule_ticks and at most p_batch of
-- pgqueue.unique_keys that no guarantee needs any more (both grew forever before revision 0008):
--   a tick, when a later tick of its schedule (not after the database clock) is recorded, and
--     it lies before the schedule's catch-up window (catch_up * period + 60 s before now):
--     pgqueue.enqueue_tick refuses such a tick, so its row no longer keeps it from running
--     twice, and the latest tick, which the scheduler counts on from, always stays. Ticks of
--     schedules registered before revision 0008 (no period yet) are all kept;
--   a unique key (scope 'period'), when its period ended and its job is no longer in
--     pgqueue.jobs: pgqueue.enqueue_unique takes over an expired key as if it were absent.
--     Keys of the 'queued' and 'active' scopes live in the rows of pgqueue.jobs and go with them.
-- Rows another session holds are skipped (SKIP LOCKED), so concurrent workers, and a dispatch
-- taking over a key, never wait on a prune; call again while a count equals p_batch.
-- From psql:  select * from pgqueue.prune_ticks_and_keys(10000);
create or replace function pgqueue.prune_ticks_and_keys(p_batch integer)
returns table (ticks_deleted integer, keys_deleted integer)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_now timestamptz := clock_timestamp();
    v_ticks integer := 0;
    v_keys integer := 0;
begin
    if p_batch is null or p_batch < 1 then
        raise exception 'pgqueue.prune_ticks_and_keys: batch must be >= 1, got %', p_batch using errcode = '22023';
    end if;
    delete from pgqueue.schedule_ticks t
    where t.ctid = any (array(
        select o.ctid
        from pgqueue.schedules s
        cross join lateral (
            select least(max(l.tick),
                         -- The start of the catch-up window, no earlier than year 1.
                         to_timestamp(greatest(extract(epoch from v_now)::double precision
                                               - s.catch_up::double precision * s.period_seconds - 60,
                                               -62135596800))) as cutoff
            from pgqueue.schedule_ticks l
            where l.schedule = s.name and l.tick <= v_now) c
        join pgqueue.schedule_ticks o on o.schedule = s.name and o.tick < c.cutoff
        where s.period_seconds is not null
        limit p_batch
        for update of o skip locked));
    get diagnostics v_ticks = row_count;
    delete from pgqueue.unique_keys k
    where k.ctid = any (array(
        select o.ctid from pgqueue.unique_keys o
        where o.expires_at <= v_now
          and not exists (select 1 from pgqueue.jobs j where j.id = o.job_id)
        order by o.expires_at
        limit p_batch
        for update of o skip locked));
    get diagnostics v_keys = row_count;
    return query select v_ticks, v_keys;
end
$$;

comment on function pgqueue.prune_ticks_and_keys(integer) is
    'pgqueue: delete a batch of schedule ticks before their catch-up window (the latest kept) and of expired unique keys whose job is gone (workers'' maintenance).';
