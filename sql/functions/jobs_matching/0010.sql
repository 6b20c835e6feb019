-- pgqueue.jobs_matching(job, queue, name, args, state, since, until) -> whether a job matches a search
-- The one definition of the dashboard's job search (issue 29), shared by its list and its bulk
-- actions: queue (exact), name (a part of the job name, case-insensitive), args (jsonb
-- containment: the job's args hold every key and value given), state (ready, delayed, blocked,
-- reserved, expired), and dispatch time (since inclusive, until exclusive). A null filter matches
-- everything. Revision 0010 (issue 26): a job waiting for its parents or its batch (available_at =
-- pgqueue.never()) is 'blocked', no longer 'delayed', as in pgqueue.queue_stats and job_state.
create or replace function pgqueue.jobs_matching(p_job pgqueue.jobs, p_queue text, p_name text, p_args jsonb,
                                                 p_state text, p_since timestamptz, p_until timestamptz)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select (p_queue is null or p_job.queue = p_queue)
       and (p_name is null
            or strpos(lower(coalesce(p_job.envelope->>'name', '')), lower(p_name)) > 0)
       and (p_args is null or coalesce(p_job.envelope->'args', '{}'::jsonb) @> p_args)
       and (p_state is null or p_state = case
                when p_job.token is not null and p_job.available_at > now() then 'reserved'
                when p_job.token is not null then 'expired'
                when p_job.available_at >= '9999-01-01 00:00:00+00'::timestamptz then 'blocked'
                when p_job.available_at > now() then 'delayed'
                else 'ready' end)
       and (p_since is null or p_job.created_at >= p_since)
       and (p_until is null or p_job.created_at < p_until)
$$;

comment on function pgqueue.jobs_matching(pgqueue.jobs, text, text, jsonb, text, timestamptz, timestamptz) is
    'pgqueue: whether a job matches the dashboard''s search (queue, part of its name, args containment, state incl. blocked, dispatch time).';
