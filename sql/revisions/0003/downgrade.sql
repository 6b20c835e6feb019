-- pgqueue revision 0003, downgrade to 0002: drops what 0003_schema.sql and 0003's functions added.
drop trigger jobs_unique_requeue on pgqueue.jobs;
drop table pgqueue.schedule_ticks;
drop table pgqueue.schedules;
drop table pgqueue.unique_keys;
drop index pgqueue.jobs_unique_queued_idx;
drop index pgqueue.jobs_unique_active_idx;
alter table pgqueue.jobs drop constraint jobs_unique_scope;
alter table pgqueue.jobs drop constraint jobs_snoozes_non_negative;
alter table pgqueue.jobs drop column unique_key, drop column unique_scope, drop column snoozes;
drop function pgqueue.unique_requeue();
drop function pgqueue.enqueue_unique(jsonb, double precision, text, text, double precision);
drop function pgqueue.snooze(uuid, bigint, double precision);
drop function pgqueue.schedule_sync(text[], text[], text[], integer[]);
drop function pgqueue.enqueue_tick(text, timestamptz, jsonb);
