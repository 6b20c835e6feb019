-- pgqueue revision 0009, downgrade to 0008: undoes upgrade.sql and drops the functions 0009 added;
-- the migration then runs the previous version of each function 0009 replaced.

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
