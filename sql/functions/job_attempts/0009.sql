-- pgqueue.job_attempts(job id) -> the job's failed attempts, oldest first
-- Every failed attempt of the job: the retried ones (reason 'retried') and each terminal failure
-- (its failed_jobs reason), across retry_failed (attempt numbers restart after one). Kept until
-- the job is gone and pgqueue.prune_results prunes them.
-- From psql:  select * from pgqueue.job_attempts('<job id>');
create or replace function pgqueue.job_attempts(p_id uuid)
returns table (attempt integer, failed_at timestamptz, reason text, exception text, message text, traceback text,
               worker text, duration double precision)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select a.attempt, a.failed_at, a.reason, a.exception, a.message, a.traceback, a.worker, a.duration
    from pgqueue.attempt_failures a
    where a.job_id = p_id
    order by a.failed_at, a.attempt
$$;

comment on function pgqueue.job_attempts(uuid) is
    'pgqueue: the failed attempts of a job, oldest first (kept across retries and retry_failed).';
