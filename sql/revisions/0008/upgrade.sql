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

-- Queue names (issue 24): the rule of pgqueue/limits.py now also refuses, anywhere in a name,
-- every control (C1 as well as C0), format (bidi controls such as U+202E, zero-width characters
-- such as U+200B), line or paragraph separator and other default ignorable character, which
-- display as nothing or reorder the text around them: two queues whose names look the same, or
-- a name that garbles a log line, a terminal or the dashboard. pgqueue.queue_name_problem,
-- enqueue and enqueue_many apply it from this revision on; the CHECK below holds it for rows
-- written by hand. As in revision 0002, existing jobs are checked, not grandfathered: if any
-- job's queue name breaks the new rule, the migration stops here, changes nothing, and says
-- what to do. (Failure records keep their queue names; retry_failed_all leaves those of such
-- queues in place.)
do $$
declare
    v_count bigint;
    v_queues text;
begin
    -- Built-ins are qualified: this block runs with the migrating role's search_path.
    select count(*), pg_catalog.string_agg(distinct pg_catalog.format('%L', j.queue), ', ')
    into v_count, v_queues
    from pgqueue.jobs j
    where not (j.queue ~ '^[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]([^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]*[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000])?$');
    if v_count > 0 then
        raise exception 'pgqueue migration 0008: % job(s) in pgqueue.jobs have a queue name the tightened rule refuses (a control, format or invisible character, or a line or paragraph separator): %',
                        v_count, v_queues
            using errcode = '23514',
                  hint = 'Nothing was changed. Move those jobs to a valid queue name, e.g. '
                         'update pgqueue.jobs set queue = ''fixed'', envelope = jsonb_set(envelope, ''{queue}'', ''"fixed"'') where queue = ''<bad name>''; '
                         'or delete them with delete from pgqueue.jobs where queue = ''<bad name>''; then migrate again.';
    end if;
end
$$;

alter table pgqueue.jobs drop constraint jobs_queue_name;
alter table pgqueue.jobs add constraint jobs_queue_name check (
    length(queue) between 1 and 200
    and queue ~ '^[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]([^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]*[^,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000])?$'
);
