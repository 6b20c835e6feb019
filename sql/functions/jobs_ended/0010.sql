-- pgqueue.jobs_ended(ids, outcome) -> nothing; what the end of jobs with dependents changes
-- Called in the statement that ends each job, so it happens exactly once per end (a stale holder
-- ends nothing): by pgqueue.ack for acked jobs marked has_dependents (outcome 'succeeded') and by
-- the trigger on failed_jobs for every terminal failure ('failed') or cancellation ('cancelled').
--   1. The open waits on these jobs (pgqueue.job_dependencies) end with them.
--   2. On a failure or cancellation, each child whose on_parent_failure is 'cancel' is moved to
--      failed_jobs with reason dependency_failed (its own children follow, transitively, through
--      the same trigger).
--   3. Every other child counts the parent as ended (pgqueue.dependent_jobs.waiting_on, row
--      locked in id order); the update that brings its count to 0 releases it: its available_at
--      becomes its dispatch due time (now at the earliest) and its queue is notified.
--   4. Each batch member's outcome is recorded once (batch_members.outcome was null) and counted
--      in its batch (row locked); the update that brings pending to 0 releases the callback if it
--      still waits (at pgqueue.never()). Revision 0010: a member retried after its batch's
--      callback was released (pgqueue.jobs_requeued) brings pending to 0 again when it ends; the
--      callback, reserved, run or ended by then, is not released a second time (and a callback in
--      a retry's backoff keeps its due time).
-- From psql (what an ack does for you):  select pgqueue.jobs_ended(array['<job id>']::uuid[], 'succeeded');
create or replace function pgqueue.jobs_ended(p_ids uuid[], p_outcome text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_children uuid[];
    v_parents uuid[];
    v_doomed uuid[];
    v_queues text[];
    v_names text[];
    v_ready text[];
    v_delayed text[];
    v_batches uuid[];
begin
    if p_outcome is null or p_outcome not in ('succeeded', 'failed', 'cancelled') then
        raise exception 'pgqueue.jobs_ended: outcome must be succeeded, failed or cancelled, got %',
                        coalesce(p_outcome, 'null')
            using errcode = '22023';
    end if;
    with gone as (
        delete from pgqueue.job_dependencies d where d.parent_id = any (p_ids)
        returning d.child_id, d.parent_id
    )
    select array_agg(g.child_id order by g.child_id), array_agg(g.parent_id order by g.child_id)
    into v_children, v_parents from gone g;
    if v_children is not null then
        -- Concurrent ends of one child's parents serialise on its row, locked in id order (no
        -- deadlock); each sees the count the previous one left.
        perform 1 from pgqueue.dependent_jobs w where w.job_id = any (v_children) order by w.job_id for update;
        if p_outcome <> 'succeeded' then
            with doomed as (
                delete from pgqueue.jobs j
                using pgqueue.dependent_jobs w
                where j.id = any (v_children) and w.job_id = j.id and w.on_parent_failure = 'cancel'
                returning j.id, j.queue, j.envelope, j.attempts
            ),
            moved as (
                insert into pgqueue.failed_jobs as f (job_id, connection, queue, envelope, attempts, message, reason)
                select d.id, coalesce(d.envelope->>'connection', 'database'), d.queue, d.envelope, d.attempts,
                       format('job %s, which it waited for, %s', v_parents[array_position(v_children, d.id)],
                              case p_outcome when 'cancelled' then 'was cancelled' else 'failed' end),
                       'dependency_failed'
                from doomed d
                returning f.job_id, f.queue, f.envelope->>'name' as name
            )
            select array_agg(m.job_id), array_agg(m.queue), array_agg(m.name)
            into v_doomed, v_queues, v_names from moved m;
        end if;
        with counted as (
            select c.child_id, count(*)::integer as n
            from unnest(v_children) c(child_id)
            where c.child_id <> all (coalesce(v_doomed, '{}'::uuid[]))
            group by c.child_id
        ),
        counted_down as (
            update pgqueue.dependent_jobs w
            set waiting_on = w.waiting_on - c.n,
                released_at = case when w.waiting_on - c.n = 0 then clock_timestamp() end
            from counted c
            where w.job_id = c.child_id and w.waiting_on > 0
            returning w.job_id, w.waiting_on, w.available_at
        ),
        released as (
            update pgqueue.jobs j set available_at = greatest(r.available_at, clock_timestamp())
            from counted_down r
            where j.id = r.job_id and r.waiting_on = 0 and j.token is null
            returning j.queue, j.available_at
        )
        select array_agg(distinct r.queue) filter (where r.available_at <= clock_timestamp()),
               array_agg(distinct r.queue) filter (where r.available_at > clock_timestamp())
        into v_ready, v_delayed from released r;
        perform pg_notify('pgqueue', q) from unnest(v_ready) q;
        perform pg_notify('pgqueue_delayed', q) from unnest(v_delayed) q;
    end if;

    with counted as (
        update pgqueue.batch_members m set outcome = p_outcome
        where m.job_id = any (p_ids) and m.outcome is null
        returning m.batch_id
    )
    select array_agg(c.batch_id order by c.batch_id) into v_batches from counted c;
    if v_batches is not null then
        perform 1 from pgqueue.batches b where b.id = any (v_batches) order by b.id for update;
        with per as (
            select b.id, count(*)::integer as n from unnest(v_batches) b(id) group by b.id
        ),
        counted as (
            update pgqueue.batches b
            set pending = b.pending - p.n,
                succeeded = b.succeeded + case when p_outcome = 'succeeded' then p.n else 0 end,
                failed = b.failed + case when p_outcome = 'failed' then p.n else 0 end,
                cancelled = b.cancelled + case when p_outcome = 'cancelled' then p.n else 0 end,
                finished_at = case when b.pending - p.n = 0 then clock_timestamp() end
            from per p
            where b.id = p.id
            returning b.callback_id, b.pending
        ),
        released as (
            update pgqueue.jobs j set available_at = clock_timestamp()
            from counted c
            where j.id = c.callback_id and c.pending = 0 and j.token is null
              and j.available_at >= pgqueue.never()
            returning j.queue
        )
        select array_agg(distinct r.queue) into v_ready from released r;
        perform pg_notify('pgqueue', q) from unnest(v_ready) q;
    end if;
    -- The cancelled children in the history last: a batch's row before the history's, in every
    -- statement that ends jobs (no two of them wait on each other in opposite orders).
    perform pgqueue.record_outcomes('cancelled', v_queues, v_names, null, null);
end
$$;

comment on function pgqueue.jobs_ended(uuid[], text) is
    'pgqueue: the consequences of jobs ending: children released or cancelled (dependency_failed), batch counts and callbacks.';
