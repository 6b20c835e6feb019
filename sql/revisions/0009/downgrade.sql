-- pgqueue revision 0009, downgrade to 0008: undoes upgrade.sql and drops the functions 0009 added;
-- the migration then runs the previous version of each function 0009 replaced.

-- issue 26: the queue_stats view without its blocked column (a column cannot be dropped from a view:
-- dropped and created as 0008 had it, its options, comment and SELECT grants kept).
do $$
declare
    v_grants text;
    v_options text[];
begin
    select string_agg(format('grant select on pgqueue.queue_stats to %s',
                             case when g.grantee = 'PUBLIC' then 'public' else quote_ident(g.grantee) end), '; ')
    into v_grants
    from information_schema.role_table_grants g
    where g.table_schema = 'pgqueue' and g.table_name = 'queue_stats' and g.privilege_type = 'SELECT'
      and g.grantee <> (select pg_get_userbyid(c.relowner) from pg_class c
                        where c.oid = 'pgqueue.queue_stats'::regclass);
    select c.reloptions into v_options from pg_class c where c.oid = 'pgqueue.queue_stats'::regclass;
    drop view pgqueue.queue_stats;
        create view pgqueue.queue_stats as
        with live as (
            select queue,
                   count(*) filter (where token is null and available_at <= now())       as ready,
                   count(*) filter (where token is null and available_at > now())        as delayed,
                   count(*) filter (where token is not null and available_at > now())    as reserved,
                   count(*) filter (where token is not null and available_at <= now())   as expired,
                   max(now() - available_at) filter (where token is null and available_at <= now())
                                                                                         as oldest_ready_age
            from pgqueue.jobs
            group by queue
        ), dead as (
            select queue, count(*) as failed from pgqueue.failed_jobs group by queue
        )
        select coalesce(live.queue, dead.queue)      as queue,
               coalesce(live.ready, 0)               as ready,
               coalesce(live.delayed, 0)             as delayed,
               coalesce(live.reserved, 0)            as reserved,
               coalesce(live.expired, 0)             as expired,
               coalesce(dead.failed, 0)              as failed,
               live.oldest_ready_age                 as oldest_ready_age
        from live full join dead on dead.queue = live.queue;
        comment on view pgqueue.queue_stats is
            'pgqueue: per queue, ready / delayed / reserved / expired-lease / failed counts and the age of the oldest ready job.';
    if v_options is not null then
        execute format('alter view pgqueue.queue_stats set (%s)', array_to_string(v_options, ', '));
    end if;
    if v_grants is not null then
        execute v_grants;
    end if;
end $$;

-- issue 28: partitions (reserve, enqueue, enqueue_many, retry_failed, retry_failed_all and
-- envelope_problem get their 0008 versions back from the migration, which no longer call these)
drop function pgqueue.reserve_partitions(text, smallint, integer, timestamptz);
drop function pgqueue.partition_allowance(text, text, integer, timestamptz);
drop function pgqueue.prune_partitions(integer);
drop function pgqueue.partition_status(text);
drop function pgqueue.set_partition_limit(text, text, integer, integer, double precision, integer, integer);
drop function pgqueue.set_partition_limits(text, integer, integer, double precision, integer, boolean);
drop function pgqueue.partition_limits_problem(integer, integer, double precision, integer, integer);
drop function pgqueue.partition_problem(jsonb);
drop table pgqueue.partitions;
alter table pgqueue.queues
    drop column partition_concurrency, drop column partition_rate_limit, drop column partition_rate_period,
    drop column partition_rate_burst, drop column partition_fair, drop column partitioned,
    drop column partition_cursor, drop column partition_credit;
alter table pgqueue.failed_jobs drop column partition;
alter table pgqueue.jobs drop column partition;

-- issue 29: reserve returns each grant's due time (its return type changed: 0007's is created again)
drop function pgqueue.reserve(text[], integer, double precision);
drop function pgqueue.reserve(text[], integer, double precision, integer);
-- issue 28: adaptive limits
drop function if exists pgqueue.set_adaptive_limit(text, integer, integer);
drop function if exists pgqueue.backpressure(uuid, bigint, double precision);
drop function if exists pgqueue.adaptive_acked(text[]);
drop index if exists pgqueue.queues_adaptive_idx;
alter table pgqueue.queues drop constraint if exists queues_adaptive, drop column if exists adaptive_min,
    drop column if exists adaptive_max, drop column if exists adaptive_acks, drop column if exists adaptive_cut_at;
-- issue 28: debounce
drop function if exists pgqueue.enqueue_debounced(jsonb, text, double precision, double precision);
drop trigger if exists jobs_debounce_reserved on pgqueue.jobs;
drop function if exists pgqueue.debounce_reserved();
drop index if exists pgqueue.jobs_debounce_idx;
alter table pgqueue.jobs drop constraint if exists jobs_debounce_key;
alter table pgqueue.jobs drop column if exists debounce_key, drop column if exists debounce_until;
-- issue 26: dependencies and batches
drop function pgqueue.add_dependencies(uuid[], uuid[], text);
drop function pgqueue.add_batch(uuid, uuid[], uuid);
drop function pgqueue.jobs_ended(uuid[], text);
drop function pgqueue.parent_results(uuid);
drop function pgqueue.batch_state(uuid);
drop function pgqueue.batch_results(uuid);
drop function pgqueue.job_family(uuid);
drop function pgqueue.never();
drop table pgqueue.batch_members;
drop table pgqueue.batches;
drop table pgqueue.dependent_jobs;
drop table pgqueue.job_dependencies;
-- Jobs still waiting for parents become ready: 0008 knows no waits.
update pgqueue.jobs set available_at = now() where available_at >= '9999-01-01 00:00:00+00';
alter table pgqueue.jobs drop column has_dependents;
-- Children cancelled for a failed parent become cancelled, the nearest reason 0008 knows.
update pgqueue.failed_jobs set reason = 'cancelled' where reason = 'dependency_failed';
-- issue 29: search and bulk actions
drop function if exists pgqueue.cancel_matching(uuid[], text, text, jsonb, text, timestamptz, timestamptz, integer);
drop function if exists pgqueue.delete_matching(uuid[], text, text, jsonb, text, timestamptz, timestamptz, integer);
drop function if exists pgqueue.retry_failed_matching(text, text, text, timestamptz, timestamptz, integer);
drop function if exists pgqueue.forget_failed_matching(text, text, text, timestamptz, timestamptz, integer);
drop function if exists pgqueue.jobs_matching(pgqueue.jobs, text, text, jsonb, text, timestamptz, timestamptz);
-- issue 29: workers
drop function if exists pgqueue.register_worker(uuid, text, integer, text[], integer, integer, text, double precision);
drop function if exists pgqueue.refresh_worker(uuid, uuid[]);
drop function if exists pgqueue.deregister_worker(uuid);
drop table if exists pgqueue.workers;
-- issue 26: results
drop function pgqueue.progress(uuid, bigint, double precision, jsonb);
alter table pgqueue.jobs drop column progress;
drop trigger failed_jobs_recorded on pgqueue.failed_jobs;
drop function pgqueue.failure_recorded();
drop table pgqueue.job_results;
drop table pgqueue.attempt_failures;
alter table pgqueue.failed_jobs drop column worker, drop column duration;
-- Failures of reason result_invalid become failed_by_handler, the nearest reason 0008 knows.
update pgqueue.failed_jobs set reason = 'failed_by_handler' where reason = 'result_invalid';
alter table pgqueue.failed_jobs drop constraint failed_jobs_reason;
alter table pgqueue.failed_jobs add constraint failed_jobs_reason check (reason in (
    'exception', 'attempts_exhausted', 'deadline_passed',
    'lease_expired_after_final_attempt', 'payload_invalid', 'unknown_job', 'failed_by_handler', 'cancelled'));
drop function pgqueue.ack_results(uuid[], bigint[], double precision[], double precision[], boolean, jsonb[], double precision[]);
drop function pgqueue.store_result(uuid, bigint, jsonb);
drop function pgqueue.job_state(uuid);
drop function pgqueue.job_attempts(uuid);
drop function pgqueue.prune_results(double precision, integer);
drop function pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision, text);
drop function pgqueue.release(uuid, bigint, double precision, double precision, double precision, jsonb);
