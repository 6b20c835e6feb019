-- pgqueue.jobs_requeued(ids) -> nothing; what putting ended jobs back in pgqueue.jobs changes
-- Called by pgqueue.retry_failed and pgqueue.retry_failed_all (so retry_failed_matching too) in
-- the statement's transaction, for the jobs they just put back (issue 26, revision 0010):
--   1. A batch member counts as not ended again: its outcome goes back to null and its batch
--      (row locked, in id order) has one more pending and one less failed or cancelled, so the
--      batch's counts stay truthful and its next end is counted once (pgqueue.jobs_ended). A
--      callback that has not started yet (never reserved) waits again, for every member to have
--      ended; a callback that was reserved, ran or ended is never released a second time
--      (jobs_ended releases only a callback still at pgqueue.never()).
--   2. A job with parents (pgqueue.dependent_jobs) waits again for those still queued or running
--      (say a parent retried in the same call); parents that ended count as ended: the operator
--      asked for this job.
--   3. The dependents cancelled with reason dependency_failed whose parents are each queued,
--      running or succeeded again (no failure record left without a kept result, as
--      pgqueue.add_dependencies judges a parent) are put back as well, waiting for their open
--      parents (their latest failure record removed, like a retry; within their deadline), and
--      this applies to them in turn: a retried parent brings back its chain, transitively.
--   0. (issue 27) A workflow whose last step waits for a child (it was cancelled while it waited:
--      pgqueue.cancel cancelled the child with it) or failed on one (the child's failure failed the
--      workflow), a child that ended in failed_jobs and is not queued again, resumes where it
--      stopped: that child is retried first (pgqueue.retry_failed, so its own children and
--      dependents follow; not past its deadline), a failed step waits for it again, and 2. below
--      makes the workflow wait for it. Other steps are kept as they are (a step that failed runs
--      again with fresh tries; a child failure the code caught replays as it was).
-- From psql (what retry_failed does for you):  select pgqueue.jobs_requeued(array['<job id>']::uuid[]);
create or replace function pgqueue.jobs_requeued(p_ids uuid[])
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_batches uuid[];
    v_waiting uuid[];
    v_restored uuid[];
    v_child record;
begin
    if cardinality(p_ids) is null then
        return;
    end if;
    -- 0. issue 27: a workflow put back gets back the child its last step waits for or failed on.
    for v_child in
        select s.job_id, s.seq, s.state, f.id as failure_id
        from pgqueue.jobs j
        cross join lateral (select w.job_id, w.seq, w.kind, w.state, w.child_id from pgqueue.workflow_steps w
                            where w.job_id = j.id order by w.seq desc limit 1) s
        cross join lateral (select f.id, f.envelope from pgqueue.failed_jobs f where f.job_id = s.child_id
                            order by f.failed_at desc, f.id limit 1) f
        where j.id = any (p_ids) and j.envelope ? 'workflow'
          and s.kind = 'child' and s.state in ('waiting', 'failed')
          and not exists (select 1 from pgqueue.jobs c where c.id = s.child_id)
          and (f.envelope->>'retry_until' is null
               or to_timestamp((f.envelope->>'retry_until')::double precision) >= clock_timestamp())
        order by s.job_id
    loop
        perform pgqueue.retry_failed(v_child.failure_id);
        if v_child.state = 'failed' then
            update pgqueue.workflow_steps w set state = 'waiting', error = null, ended_at = null
            where w.job_id = v_child.job_id and w.seq = v_child.seq;
        end if;
    end loop;

    -- 1. Batch members ended once, counted again as pending.
    select array_agg(distinct m.batch_id order by m.batch_id) into v_batches
    from pgqueue.batch_members m where m.job_id = any (p_ids) and m.outcome is not null;
    if v_batches is not null then
        perform 1 from pgqueue.batches b where b.id = any (v_batches) order by b.id for update;
        with old as (
            select m.job_id, m.batch_id, m.outcome from pgqueue.batch_members m
            where m.job_id = any (p_ids) and m.outcome is not null
            for update
        ),
        reopened as (
            update pgqueue.batch_members m set outcome = null
            from old o where m.job_id = o.job_id
            returning o.batch_id, o.outcome
        ),
        per as (
            select r.batch_id, count(*)::integer as n,
                   count(*) filter (where r.outcome = 'succeeded')::integer as s,
                   count(*) filter (where r.outcome = 'failed')::integer as f,
                   count(*) filter (where r.outcome = 'cancelled')::integer as c
            from reopened r group by r.batch_id
        ),
        recounted as (
            update pgqueue.batches b
            set pending = b.pending + p.n, succeeded = b.succeeded - p.s, failed = b.failed - p.f,
                cancelled = b.cancelled - p.c, finished_at = null
            from per p where b.id = p.batch_id
            returning b.callback_id
        )
        update pgqueue.jobs j set available_at = pgqueue.never()
        from recounted r
        where j.id = r.callback_id and j.token is null and j.attempts = 0;
    end if;
    update pgqueue.jobs j set has_dependents = true
    where j.id = any (p_ids) and not j.has_dependents
      and exists (select 1 from pgqueue.batch_members m where m.job_id = j.id);

    -- 2. Jobs with parents wait again for the parents that are open. The parents' rows are
    -- locked in id order (as pgqueue.add_dependencies does: no deadlock with their ends).
    perform 1 from pgqueue.jobs j
    where j.id in (select p from pgqueue.dependent_jobs w, unnest(w.parents) p where w.job_id = any (p_ids))
    order by j.id for update;
    with open_parents as (
        select w.job_id as child_id, p as parent_id
        from pgqueue.dependent_jobs w, unnest(w.parents) p
        where w.job_id = any (p_ids) and exists (select 1 from pgqueue.jobs j where j.id = p)
    ),
    marked as (
        update pgqueue.jobs j set has_dependents = true
        where j.id in (select o.parent_id from open_parents o) and not j.has_dependents
    ),
    edges as (
        insert into pgqueue.job_dependencies (parent_id, child_id)
        select o.parent_id, o.child_id from open_parents o
        on conflict do nothing
    ),
    per as (
        select o.child_id, count(*)::integer as n from open_parents o group by o.child_id
    ),
    counted as (
        update pgqueue.dependent_jobs w set waiting_on = p.n, released_at = null
        from per p where w.job_id = p.child_id
        returning w.job_id
    )
    select array_agg(c.job_id) into v_waiting from counted c;
    if v_waiting is not null then
        update pgqueue.jobs j set available_at = pgqueue.never() where j.id = any (v_waiting) and j.token is null;
    end if;

    -- 3. The dependents cancelled because of these jobs, whose parents are all open or succeeded.
    with candidates as (
        select distinct on (f.job_id) f.id, f.job_id, f.queue, f.envelope, f.attempts, f.partition, f.reason,
               to_timestamp((f.envelope->>'retry_until')::double precision) as retry_until
        from pgqueue.dependent_jobs w
        join pgqueue.failed_jobs f on f.job_id = w.job_id
        where w.parents && p_ids and w.on_parent_failure = 'cancel'
          and not exists (select 1 from pgqueue.jobs j where j.id = w.job_id)
          and not exists (select 1 from unnest(w.parents) p
                          where not exists (select 1 from pgqueue.jobs j where j.id = p)
                            and exists (select 1 from pgqueue.failed_jobs pf where pf.job_id = p)
                            and not exists (select 1 from pgqueue.job_results r where r.job_id = p))
        order by f.job_id, f.failed_at desc, f.id
    ),
    picked as (
        select c.* from candidates c
        where c.reason = 'dependency_failed'
          and (c.retry_until is null or c.retry_until >= clock_timestamp())
    ),
    back as (
        insert into pgqueue.jobs (id, queue, priority, envelope, attempts, max_tries, retry_until, available_at,
                                  partition)
        select p.job_id, p.queue, coalesce((p.envelope->>'priority')::smallint, 0), p.envelope, p.attempts,
               greatest(coalesce((p.envelope->>'tries')::integer, 1), 1), p.retry_until, pgqueue.never(),
               p.partition
        from picked p
        on conflict (id) do nothing
        returning pgqueue.jobs.id
    ),
    gone as (
        delete from pgqueue.failed_jobs f using picked p, back b where f.id = p.id and b.id = p.job_id
    )
    select array_agg(b.id) into v_restored from back b;
    if v_restored is not null then
        perform pgqueue.jobs_requeued(v_restored);
    end if;
end
$$;

comment on function pgqueue.jobs_requeued(uuid[]) is
    'pgqueue: the consequences of failed jobs put back: batch members pending again, dependents waiting again or restored.';
