-- pgqueue.add_dependencies(children, parents, on_parent_failure) -> how many parents are still open
-- Makes each of p_children (jobs just enqueued in this transaction: waiting, not reserved, with no
-- dependents of their own, so no cycle can form) wait until every job of p_parents has ended:
--   a parent still queued or running: its row is locked and marked (has_dependents) and an edge
--     (pgqueue.job_dependencies) is stored; its end releases or cancels the children
--     (pgqueue.jobs_ended, from the ack, fail, cancel and reservation paths);
--   a parent that failed or was cancelled (its latest failure record): with on_parent_failure
--     'cancel' the children are moved to failed_jobs at once (reason dependency_failed); with
--     'run' that parent counts as ended;
--   a parent that succeeded (its result kept in job_results, or its copy in completed_jobs):
--     ended, nothing to wait for;
--   any other id is refused (SQLSTATE 22023, naming it) and the whole call changes nothing.
-- Revision 0010: a child holding a unique key or a debounce key is refused (22023, naming it):
-- pgqueue.enqueue_unique and enqueue_debounced return the job already holding the key for a
-- duplicate, which must not silently wait in the place of the job the caller meant.
-- A child with open parents gets available_at = pgqueue.never() until the last one ends; its
-- due time (its dispatch delay) is kept in pgqueue.dependent_jobs.
-- From psql:  select pgqueue.add_dependencies(array['<child>']::uuid[], array['<parent>']::uuid[], 'cancel');
create or replace function pgqueue.add_dependencies(p_children uuid[], p_parents uuid[], p_on_parent_failure text)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_parents uuid[];
    v_live uuid[];
    v_failed uuid;
    v_bad uuid;
    v_count integer;
    v_queues text[];
    v_names text[];
begin
    if p_on_parent_failure is null or p_on_parent_failure not in ('cancel', 'run') then
        raise exception 'pgqueue.add_dependencies: on_parent_failure must be ''cancel'' or ''run'', got %',
                        coalesce(p_on_parent_failure, 'null')
            using errcode = '22023';
    end if;
    if cardinality(p_children) is null or cardinality(p_parents) is null
       or array_position(p_children, null) is not null or array_position(p_parents, null) is not null then
        raise exception 'pgqueue.add_dependencies: give at least one child and one parent, none of them null'
            using errcode = '22023';
    end if;
    v_parents := array(select distinct p from unnest(p_parents) p order by p);
    if p_children && v_parents then
        raise exception 'pgqueue.add_dependencies: a job cannot wait for itself (%)',
                        (select c from unnest(p_children) c where c = any (v_parents) limit 1)
            using errcode = '22023';
    end if;
    -- issue 26: a key's holder is another job (the duplicate's dispatch returned its id)
    select c into v_bad from unnest(p_children) c
    where exists (select 1 from pgqueue.jobs j where j.id = c and (j.unique_key is not null or j.debounce_key is not null))
    limit 1;
    if found then
        raise exception 'pgqueue.add_dependencies: job % holds a unique or debounce key, so it cannot be given parents (a dispatch with that key may have returned it for a duplicate); nothing was dispatched',
                        v_bad
            using errcode = '22023';
    end if;
    select c into v_bad from unnest(p_children) c
    where not exists (select 1 from pgqueue.jobs j where j.id = c and j.token is null and not j.has_dependents)
       or exists (select 1 from pgqueue.dependent_jobs w where w.job_id = c)
    limit 1;
    if found then
        raise exception 'pgqueue.add_dependencies: job % cannot be given parents: only a job just dispatched (queued, not running, without parents or dependents of its own) can',
                        v_bad
            using errcode = '22023';
    end if;
    -- Lock the open parents in id order (concurrent dispatches never deadlock); a parent ending
    -- meanwhile is skipped by the lock and found ended below, in a later snapshot.
    select array_agg(l.id) into v_live
    from (select j.id from pgqueue.jobs j where j.id = any (v_parents) order by j.id for update) l;
    v_live := coalesce(v_live, '{}');
    update pgqueue.jobs j set has_dependents = true where j.id = any (v_live) and not j.has_dependents;
    -- The parents that ended: failed or cancelled (their latest record), else succeeded if known.
    select p into v_bad from unnest(v_parents) p
    where p <> all (v_live)
      and not exists (select 1 from pgqueue.failed_jobs f where f.job_id = p)
      and not exists (select 1 from pgqueue.job_results r where r.job_id = p)
      and not exists (select 1 from pgqueue.completed_jobs c where c.job_id = p)
    limit 1;
    if found then
        raise exception 'pgqueue.add_dependencies: parent job % is unknown: it is not queued or running, has no failure record and no kept success (result or completed copy); nothing was dispatched',
                        v_bad
            using errcode = '22023',
                  hint = 'A parent must still be queued or running at dispatch, or have failed, or have kept its result (result_ttl > 0).';
    end if;
    select p into v_failed from unnest(v_parents) p
    where p <> all (v_live)
      and exists (select 1 from pgqueue.failed_jobs f where f.job_id = p)
      and not exists (select 1 from pgqueue.job_results r where r.job_id = p)
    limit 1;
    if v_failed is not null and p_on_parent_failure = 'cancel' then
        with doomed as (
            delete from pgqueue.jobs j where j.id = any (p_children)
            returning j.id, j.queue, j.envelope, j.attempts
        ),
        moved as (
            insert into pgqueue.failed_jobs as f (job_id, connection, queue, envelope, attempts, message, reason)
            select d.id, coalesce(d.envelope->>'connection', 'database'), d.queue, d.envelope, d.attempts,
                   format('job %s, which it was to wait for, had already failed or been cancelled', v_failed),
                   'dependency_failed'
            from doomed d
            returning f.queue, f.envelope->>'name' as name
        )
        select array_agg(m.queue), array_agg(m.name) into v_queues, v_names from moved m;
        perform pgqueue.record_outcomes('cancelled', v_queues, v_names, null, null);
        return 0;
    end if;
    -- Every child keeps its parents (pgqueue.parent_results), released at once when none is open.
    v_count := cardinality(v_live);
    insert into pgqueue.dependent_jobs (job_id, parents, waiting_on, on_parent_failure, available_at, released_at)
    select j.id, v_parents, v_count, p_on_parent_failure, j.available_at,
           case when v_count = 0 then clock_timestamp() end
    from pgqueue.jobs j where j.id = any (p_children);
    if v_count = 0 then
        return 0;
    end if;
    insert into pgqueue.job_dependencies (parent_id, child_id)
    select p, c from unnest(v_live) p cross join unnest(p_children) c;
    update pgqueue.jobs j set available_at = pgqueue.never() where j.id = any (p_children);
    return v_count;
end
$$;

comment on function pgqueue.add_dependencies(uuid[], uuid[], text) is
    'pgqueue: make just-dispatched jobs wait until every parent has ended (cancelled with dependency_failed if one fails, unless run).';
