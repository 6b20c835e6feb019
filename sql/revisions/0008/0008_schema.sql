-- pgqueue schema, revision 0008: the surfaces of revisions 0003-0007 hardened against adversarial
-- input (unique keys under REPEATABLE READ, queue names, ticks the database decides, a cancel the
-- database recorded, failure records that always store). Executed by the alembic revision 0008
-- (migrations/versions/), before its functions.

-- Issue 24, item 4: an attempt the worker itself interrupts (a forced stop) is given back, not
-- retried (pgqueue.release_interrupted): the history counts it apart.
alter table pgqueue.job_stats add column given_back bigint not null default 0;
comment on column pgqueue.job_stats.given_back is
    'pgqueue: attempts the worker interrupted (a forced stop) and gave back with their try (pgqueue.release_interrupted).';
-- Periodic jobs: ticks the database decides (issue 24, part C). A schedule is registered with
-- its period (the most seconds between two of its ticks: n for 'every <n>s'; for a cron
-- expression, the longest gap between two of its ticks, computed at registration) and the
-- template of its jobs' envelope (all of it but the id). pgqueue.enqueue_tick then takes only
-- (schedule, tick), refuses a tick the schedule does not have or that lies outside its
-- catch-up window, and builds the job from the template. Schedules registered before 0008 keep
-- their rows and ticks; they have neither column (and do not tick) until registered again.
alter table pgqueue.schedules
    add column period_seconds bigint,
    add column template jsonb,
    add constraint schedules_period_positive check (period_seconds >= 1),
    add constraint schedules_template_object check (jsonb_typeof(template) = 'object');
-- The 0003 functions took any envelope under any schedule name (enqueue_tick) and schedules
-- without a template (schedule_sync); their replacements have other arguments.
drop function pgqueue.enqueue_tick(text, timestamptz, jsonb);
drop function pgqueue.schedule_sync(text[], text[], text[], integer[]);

-- Expired unique keys are pruned by pgqueue.prune_ticks_and_keys (the workers' maintenance),
-- oldest first: found through this index instead of a scan of every key held.
create index unique_keys_expires_at_idx on pgqueue.unique_keys (expires_at);
