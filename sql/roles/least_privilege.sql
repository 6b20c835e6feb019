-- pgqueue least privilege: three group roles, each allowed exactly its part of the queue.
--
--   pgqueue_producer  enqueue jobs (pgqueue.enqueue, pgqueue.enqueue_many, pgqueue.enqueue_unique,
--                     pgqueue.enqueue_debounced), and register
--                     periodic jobs with the template of their jobs (pgqueue.schedule_sync); nothing else
--   pgqueue_worker    reserve, mark_started, hand_over, ack, release, release_unstarted, release_interrupted, extend,
--                     heartbeat, fail, snooze, backpressure, next_due, prune_history, prune_ticks_and_keys, schedule_state,
--                     enqueue_tick (periodic jobs), cancelled (is a cancel notification real?); read queue_stats
--                     and queues (the metrics' queue depths and paused queues); LISTEN
--                     partition_depths (the metrics per partition, issue 28)
--   pgqueue_operator  read jobs, failed_jobs, queue_stats, job_stats, completed_jobs, queues, schedules and
--                     schedule_ticks; retry_failed, retry_failed_all, forget_failed, flush_failed, clear, cancel,
--                     pause, resume, set_limits, set_adaptive_limit, set_adaptive_decrease,
--                     set_partition_adaptive_limit, set_aging (issue 28)
--
-- How: none of the three may write to a table or use the sequence (operators only read). The stored functions
-- run with the privileges of their owner (SECURITY DEFINER) and a fixed search_path, so a
-- producer can insert a job only through enqueue's validation and can never read another
-- job's args; a worker can change a job only through the fenced functions (no UPDATE that
-- skips the token check); only operators read failures, which may hold business data.
-- Registering a schedule registers the envelope its ticks enqueue, so it is the producer's (who
-- may enqueue any job anyway), not the worker's: a worker ticks only registered schedules, with
-- the ticks the database accepts (pgqueue.enqueue_tick builds each job from the template).
--
-- Run it as the role that owns the pgqueue schema (the one that ran `pgqueue migrate`), in
-- the application's database, after every migration (a migration that replaces a function
-- resets it to SECURITY INVOKER: the roles are then refused, never granted more; the pinned
-- search_path = pg_catalog, pg_temp comes with the function itself since revision 0002):
--
--     psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f sql/roles/least_privilege.sql
--
-- Then give your login roles their group:
--
--     create role web login password '...' in role pgqueue_producer;
--     create role jobs login password '...' in role pgqueue_worker;
--     create role oncall login password '...' in role pgqueue_operator;
--
-- The script is idempotent. The group roles are cluster-wide; the grants are per database.
--
-- Creating the group roles needs CREATEROLE (or a superuser). A schema owner without it gets a
-- clear refusal before anything changes; then either run the script once as a role that has
-- CREATEROLE, or have an administrator create the three roles first and run it again as the
-- owner (it creates only the roles that are missing):
--
--     create role pgqueue_producer nologin;
--     create role pgqueue_worker nologin;
--     create role pgqueue_operator nologin;

do $$
declare
    v_role text;
    v_missing text;
begin
    select string_agg(r, ', ') into v_missing
    from unnest(array['pgqueue_producer', 'pgqueue_worker', 'pgqueue_operator']) as r
    where not exists (select 1 from pg_catalog.pg_roles where rolname = r);
    if v_missing is not null and not exists (select 1 from pg_catalog.pg_roles
                                             where rolname = current_user and (rolcreaterole or rolsuper)) then
        raise exception 'least_privilege.sql: the group role(s) % do not exist, and role % may not create them (it has no CREATEROLE); nothing was changed',
                        v_missing, current_user
            using errcode = '42501',
                  hint = 'Run this script as a role with CREATEROLE, or have one run: create role pgqueue_producer nologin; '
                         'create role pgqueue_worker nologin; create role pgqueue_operator nologin; '
                         'then run this script again as the owner of the pgqueue schema.';
    end if;
    foreach v_role in array array['pgqueue_producer', 'pgqueue_worker', 'pgqueue_operator'] loop
        if not exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
            execute format('create role %I nologin', v_role);
        end if;
    end loop;
end
$$;

-- Nothing for PUBLIC: PostgreSQL grants EXECUTE on new functions to PUBLIC by default.
revoke all on schema pgqueue from public;
revoke all on all tables in schema pgqueue from public;
revoke all on all sequences in schema pgqueue from public;
revoke all on all functions in schema pgqueue from public;

-- Run as the owner, with a search_path no caller can plant objects in (pg_temp last).
alter function pgqueue.enqueue(jsonb, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.enqueue_many(jsonb, double precision[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.reserve(text[], integer, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.reserve(text[], integer, double precision, integer, integer[], uuid[], bigint[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.mark_started(uuid[], bigint[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.hand_over(uuid[], uuid[], bigint[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.cancelled(uuid[], bigint[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.ack(uuid[], bigint[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.release(uuid, bigint, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.release_unstarted(uuid[], bigint[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.release_interrupted(uuid, bigint, double precision, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.extend(uuid, bigint, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.heartbeat(uuid[], bigint[], double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.fail(uuid, bigint, text, text, text, text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.ack(uuid[], bigint[], double precision[], double precision[], boolean)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.release(uuid, bigint, double precision, double precision, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.prune_history(double precision, double precision, integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.prune_ticks_and_keys(integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.next_due(text[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.retry_failed(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.retry_failed_all(text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.forget_failed(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.flush_failed(text, interval)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.clear(text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.enqueue_unique(jsonb, double precision, text, text, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.enqueue_debounced(jsonb, text, double precision, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.snooze(uuid, bigint, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.schedule_sync(text[], text[], text[], integer[], bigint[], jsonb[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.schedule_state(text[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.enqueue_tick(text, timestamp with time zone)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.cancel(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.pause(text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.resume(text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.set_limits(text, integer, integer, double precision, integer)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 28: adaptive limits
alter function pgqueue.set_adaptive_limit(text, integer, integer)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 28: priority aging
alter function pgqueue.set_aging(text, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.backpressure(uuid, bigint, double precision)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 29: workers
alter function pgqueue.register_worker(uuid, text, integer, text[], integer, integer, text, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.refresh_worker(uuid, uuid[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.deregister_worker(uuid)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 29: search and bulk actions
alter function pgqueue.cancel_matching(uuid[], text, text, jsonb, text, timestamptz, timestamptz, integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.delete_matching(uuid[], text, text, jsonb, text, timestamptz, timestamptz, integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.retry_failed_matching(text, text, text, timestamptz, timestamptz, integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.forget_failed_matching(text, text, text, timestamptz, timestamptz, integer)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 26: results
alter function pgqueue.release(uuid, bigint, double precision, double precision, double precision, jsonb)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision, text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.ack_results(uuid[], bigint[], double precision[], double precision[], boolean, jsonb[],
                                   double precision[])
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.store_result(uuid, bigint, jsonb)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.prune_results(double precision, integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.job_state(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.job_attempts(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.progress(uuid, bigint, double precision, jsonb)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 28: partitions
alter function pgqueue.set_partition_limits(text, integer, integer, double precision, integer, boolean)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.set_partition_limit(text, text, integer, integer, double precision, integer, integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.partition_status(text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.prune_partitions(integer)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 28: adaptive limits per partition, a configurable cut, per-partition metrics
alter function pgqueue.set_partition_adaptive_limit(text, text, integer, integer)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.set_adaptive_decrease(text, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.partition_depths(integer)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 26: dependencies and batches (pgqueue.jobs_ended runs inside the functions that end an
-- attempt, as their owner, and is granted to nobody: no role can release a child by itself; so does
-- pgqueue.jobs_requeued, inside retry_failed and retry_failed_all)
alter function pgqueue.add_dependencies(uuid[], uuid[], text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.add_batch(uuid, uuid[], uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.parent_results(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.batch_state(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.batch_results(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.job_family(uuid)
    security definer set search_path = pg_catalog, pg_temp;
-- issue 27: durable workflows
alter function pgqueue.workflow_checkpoint(uuid, bigint, integer, text, text, jsonb, double precision, text)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.workflow_step_failed(uuid, bigint, integer, text, text, integer, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.workflow_wait(uuid, bigint, integer, text, text, text, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.workflow_child(uuid, bigint, integer, text, jsonb, double precision)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.workflow_steps_of(uuid)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.signal(uuid, text, jsonb)
    security definer set search_path = pg_catalog, pg_temp;
alter function pgqueue.prune_workflows(integer)
    security definer set search_path = pg_catalog, pg_temp;

grant usage on schema pgqueue to pgqueue_producer, pgqueue_worker, pgqueue_operator;

grant execute on function
    pgqueue.enqueue(jsonb, double precision),
    pgqueue.enqueue_many(jsonb, double precision[]),
    pgqueue.enqueue_unique(jsonb, double precision, text, text, double precision),
    pgqueue.enqueue_debounced(jsonb, text, double precision, double precision),  -- issue 28: debounce
    pgqueue.schedule_sync(text[], text[], text[], integer[], bigint[], jsonb[])
to pgqueue_producer;
-- issue 26: results. Whoever dispatches may follow its jobs (their state, result and errors).
grant execute on function pgqueue.job_state(uuid), pgqueue.job_attempts(uuid)
to pgqueue_producer, pgqueue_operator;
grant execute on function
    pgqueue.release(uuid, bigint, double precision, double precision, double precision, jsonb),
    pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision, text),
    pgqueue.ack_results(uuid[], bigint[], double precision[], double precision[], boolean, jsonb[], double precision[]),
    pgqueue.store_result(uuid, bigint, jsonb),
    pgqueue.prune_results(double precision, integer),
    pgqueue.progress(uuid, bigint, double precision, jsonb)
to pgqueue_worker;
grant select on pgqueue.attempt_failures, pgqueue.job_results to pgqueue_operator;
-- issue 26: dependencies and batches. A producer dispatches jobs with what they wait for; a worker's
-- handler reads its parents' results and its batch; all three may follow a batch and a job's family.
grant execute on function pgqueue.add_dependencies(uuid[], uuid[], text), pgqueue.add_batch(uuid, uuid[], uuid)
to pgqueue_producer;
grant execute on function pgqueue.parent_results(uuid), pgqueue.batch_state(uuid), pgqueue.batch_results(uuid),
    pgqueue.job_family(uuid), pgqueue.never()
to pgqueue_producer, pgqueue_worker, pgqueue_operator;
grant select on pgqueue.job_dependencies, pgqueue.dependent_jobs, pgqueue.batches, pgqueue.batch_members
to pgqueue_operator;

-- issue 27: durable workflows. A worker runs their steps (fenced by the token, like an ack; a child
-- is dispatched through the fenced pgqueue.workflow_child only); whoever dispatches may signal a
-- workflow and read its steps; operators read the tables and the view too.
grant execute on function
    pgqueue.workflow_checkpoint(uuid, bigint, integer, text, text, jsonb, double precision, text),
    pgqueue.workflow_step_failed(uuid, bigint, integer, text, text, integer, double precision),
    pgqueue.workflow_wait(uuid, bigint, integer, text, text, text, double precision),
    pgqueue.workflow_child(uuid, bigint, integer, text, jsonb, double precision),
    pgqueue.prune_workflows(integer)
to pgqueue_worker;
grant execute on function pgqueue.workflow_steps_of(uuid) to pgqueue_producer, pgqueue_worker, pgqueue_operator;
grant execute on function pgqueue.signal(uuid, text, jsonb) to pgqueue_producer, pgqueue_worker, pgqueue_operator;
grant select on pgqueue.workflow_steps, pgqueue.workflow_signals, pgqueue.workflows to pgqueue_operator;

grant execute on function
    pgqueue.reserve(text[], integer, double precision),
    pgqueue.reserve(text[], integer, double precision, integer, integer[], uuid[], bigint[]),
    pgqueue.mark_started(uuid[], bigint[]),
    pgqueue.hand_over(uuid[], uuid[], bigint[]),
    pgqueue.cancelled(uuid[], bigint[]),
    pgqueue.ack(uuid[], bigint[]),
    pgqueue.release(uuid, bigint, double precision),
    pgqueue.release_unstarted(uuid[], bigint[]),
    pgqueue.release_interrupted(uuid, bigint, double precision, double precision),
    pgqueue.extend(uuid, bigint, double precision),
    pgqueue.heartbeat(uuid[], bigint[], double precision),
    pgqueue.fail(uuid, bigint, text, text, text, text),
    pgqueue.ack(uuid[], bigint[], double precision[], double precision[], boolean),
    pgqueue.release(uuid, bigint, double precision, double precision, double precision),
    pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision),
    pgqueue.prune_history(double precision, double precision, integer),
    pgqueue.prune_ticks_and_keys(integer),
    pgqueue.next_due(text[]),
    pgqueue.snooze(uuid, bigint, double precision),
    pgqueue.backpressure(uuid, bigint, double precision),
    pgqueue.schedule_state(text[]),
    pgqueue.enqueue_tick(text, timestamp with time zone),
    -- issue 29: workers
    pgqueue.register_worker(uuid, text, integer, text[], integer, integer, text, double precision),
    pgqueue.refresh_worker(uuid, uuid[]),
    pgqueue.deregister_worker(uuid)
to pgqueue_worker;

grant execute on function
    pgqueue.retry_failed(uuid),
    pgqueue.retry_failed_all(text),
    pgqueue.forget_failed(uuid),
    pgqueue.flush_failed(text, interval),
    pgqueue.clear(text),
    pgqueue.cancel(uuid),
    pgqueue.pause(text),
    pgqueue.resume(text),
    pgqueue.set_limits(text, integer, integer, double precision, integer),
    pgqueue.set_adaptive_limit(text, integer, integer),
    -- issue 28: priority aging
    pgqueue.set_aging(text, double precision),
    -- issue 29: search and bulk actions
    pgqueue.jobs_matching(pgqueue.jobs, text, text, jsonb, text, timestamptz, timestamptz),
    pgqueue.cancel_matching(uuid[], text, text, jsonb, text, timestamptz, timestamptz, integer),
    pgqueue.delete_matching(uuid[], text, text, jsonb, text, timestamptz, timestamptz, integer),
    pgqueue.retry_failed_matching(text, text, text, timestamptz, timestamptz, integer),
    pgqueue.forget_failed_matching(text, text, text, timestamptz, timestamptz, integer)
to pgqueue_operator;
grant select on pgqueue.jobs, pgqueue.failed_jobs, pgqueue.queue_stats to pgqueue_operator;
-- Per-queue counts only (no job data): a worker with metrics samples the queue depths from it.
grant select on pgqueue.queue_stats to pgqueue_worker;
-- issue 29: and whether each queue is paused (queue names and settings: no job data).
grant select on pgqueue.queues to pgqueue_worker;
-- Queue controls and schedules (names, settings and tick times: no job data).
grant select on pgqueue.queues, pgqueue.schedules, pgqueue.schedule_ticks to pgqueue_operator;
-- The history (counts and timings only; completed_jobs holds args: operators only).
grant select on pgqueue.job_stats, pgqueue.completed_jobs to pgqueue_operator;
-- issue 29: the registered workers (hosts, pids, queues, held job ids: no job data).
grant select on pgqueue.workers to pgqueue_operator;
-- issue 28: partitions (limits, overrides and per-partition counts: no job data).
grant execute on function
    pgqueue.set_partition_limits(text, integer, integer, double precision, integer, boolean),
    pgqueue.set_partition_limit(text, text, integer, integer, double precision, integer, integer),
    pgqueue.partition_status(text)
to pgqueue_operator;
grant select on pgqueue.partitions to pgqueue_operator;
grant execute on function pgqueue.prune_partitions(integer) to pgqueue_worker;
-- issue 28: adaptive limits per partition, a configurable cut (operators), per-partition metrics
-- (a worker's depth sampler: counts and limits per partition, no job data)
grant execute on function
    pgqueue.set_partition_adaptive_limit(text, text, integer, integer),
    pgqueue.set_adaptive_decrease(text, double precision)
to pgqueue_operator;
grant execute on function pgqueue.partition_depths(integer) to pgqueue_worker;
