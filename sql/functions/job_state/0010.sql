-- pgqueue.job_state(job id) -> one row: where the job is, or no row when pgqueue knows nothing of it
-- state: 'waiting' (ready), 'blocked' (at pgqueue.never(): waiting for its parents or, a batch's callback, for its
-- members: available_at is then null), 'delayed', 'running' (reserved, or acked inside its handler's
-- transaction with its result still pending), 'succeeded' (a kept result, or a copy in
-- completed_jobs), 'failed' or 'cancelled' (its latest failure record; a dependency_failed job is
-- cancelled). A job acked without
-- keeping a result or a copy leaves no row: no row is returned. attempts and tries as stored;
-- the times of its creation, when it is due (waiting, delayed) or its lease ends (running), its
-- reservation and its end; result and its expiry when kept; for a failure its id, reason and
-- message; errors: pgqueue.job_attempts as a JSON array; result_ttl: the seconds its dispatch said
-- to keep its result (null: its job type decides); progress: a live job's last progress report
-- (pgqueue.progress); issue 26 §2: parents (the jobs it was dispatched to wait for), children (the
-- jobs still waiting for it) and batch_id (the batch it is a member or the callback of), from
-- pgqueue.job_family. Revision 0010: job_family lists the children that stopped waiting too;
-- children here stays the ones still waiting (its open rows).
-- From psql:  select * from pgqueue.job_state('<job id>');
create or replace function pgqueue.job_state(p_id uuid)
returns table (state text, queue text, name text, attempts integer, tries integer, created_at timestamptz,
               available_at timestamptz, reserved_at timestamptz, finished_at timestamptz, result jsonb,
               result_expires_at timestamptz, failure_id uuid, reason text, message text, errors jsonb,
               result_ttl double precision, progress jsonb, parents uuid[], children uuid[], batch_id uuid)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    with found as (
        select case when j.token is not null then 'running'
                    when j.available_at >= '9999-01-01 00:00:00+00'::timestamptz then 'blocked'
                    when j.available_at > now() then 'delayed'
                    else 'waiting' end as state,
               j.queue, j.envelope->>'name' as name, j.attempts, j.max_tries as tries, j.created_at,
               nullif(j.available_at, '9999-01-01 00:00:00+00'::timestamptz) as available_at, j.reserved_at, null::timestamptz as finished_at, null::jsonb as result,
               null::timestamptz as result_expires_at, null::uuid as failure_id, null::text as reason,
               null::text as message, (j.envelope->>'result_ttl')::double precision as result_ttl, j.progress, 1 as rank
        from pgqueue.jobs j where j.id = p_id
        union all
        (select case when f.reason in ('cancelled', 'dependency_failed') then 'cancelled' else 'failed' end, f.queue, f.envelope->>'name',
                f.attempts, (f.envelope->>'tries')::integer, null, null, null, f.failed_at, null, null, f.id,
                f.reason, f.message, (f.envelope->>'result_ttl')::double precision, null, 2
         from pgqueue.failed_jobs f where f.job_id = p_id order by f.failed_at desc limit 1)
        union all
        select case when r.token is null then 'succeeded' else 'running' end, r.queue, r.name, r.attempts, null,
               null, null, null, r.finished_at, r.result, r.expires_at, null, null, null, null, null, 3
        from pgqueue.job_results r where r.job_id = p_id
        union all
        (select 'succeeded', c.queue, c.envelope->>'name', c.attempts, (c.envelope->>'tries')::integer, c.created_at,
                null, c.reserved_at, c.finished_at, null, null, null, null, null,
                (c.envelope->>'result_ttl')::double precision, null, 4
         from pgqueue.completed_jobs c where c.job_id = p_id order by c.finished_at desc limit 1)
    )
    select f.state, f.queue, f.name, f.attempts, f.tries, f.created_at, f.available_at, f.reserved_at,
           f.finished_at, f.result, f.result_expires_at, f.failure_id, f.reason, f.message,
           to_jsonb(array(select to_jsonb(a) from pgqueue.job_attempts(p_id) a)), f.result_ttl, f.progress,
           array(select x.other_id from pgqueue.job_family(p_id) x where x.kind = 'parent'),
           array(select x.other_id from pgqueue.job_family(p_id) x where x.kind = 'child' and x.open),  -- 0010: still waiting
           (select x.other_id from pgqueue.job_family(p_id) x where x.kind = 'batch' limit 1)
    from found f
    order by f.rank
    limit 1
$$;

comment on function pgqueue.job_state(uuid) is
    'pgqueue: the state of one job (waiting, blocked, delayed, running, succeeded, failed, cancelled), its times, result, failure and failed attempts.';
