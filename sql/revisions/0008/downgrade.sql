-- pgqueue revision 0008, downgrade to 0007: undoes 0008_schema.sql and its functions; the
-- migration then runs the frozen copies of the functions 0008 replaced, as 0007 had them.

-- Issue 24, item 4 (the migration then runs 0005's record_outcomes again).
drop function pgqueue.release_interrupted(uuid, bigint, double precision, double precision);
alter table pgqueue.job_stats drop column given_back;
-- A cancel notification checked with the database (issue 24, item 8): new in 0008.
drop function if exists pgqueue.cancelled(uuid[], bigint[]);
-- Periodic jobs (issue 24, part C): back to 0003's enqueue_tick and schedule_sync, which the
-- migration runs after this file; the registered periods and templates are dropped.
drop function pgqueue.enqueue_tick(text, timestamptz);
drop function pgqueue.schedule_sync(text[], text[], text[], integer[], bigint[], jsonb[]);
drop function pgqueue.schedule_state(text[]);
alter table pgqueue.schedules
    drop constraint schedules_period_positive,
    drop constraint schedules_template_object,
    drop column period_seconds,
    drop column template;

-- Pruning of schedule ticks and expired unique keys (issue 24, part C).
drop function pgqueue.prune_ticks_and_keys(integer);
drop index pgqueue.unique_keys_expires_at_idx;

-- Queue names: the CHECK of revision 0002 (every name the 0008 rule accepts, it accepts too).
alter table pgqueue.jobs drop constraint jobs_queue_name;
alter table pgqueue.jobs add constraint jobs_queue_name check (
    length(queue) between 1 and 200
    and queue ~ '^[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]([^,\u0001-\u001f\u007f]*[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000])?$'
);
drop function pgqueue.shown(text);
