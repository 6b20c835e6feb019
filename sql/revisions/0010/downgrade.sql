-- pgqueue revision 0010's downgrade to 0009: undoes upgrade.sql, then drops the functions 0010
-- added (each replaced function's previous version runs after this file).
select 1;
-- issue 26: a retried batch member or parent (the functions that call it are replaced after this file)
drop function if exists pgqueue.jobs_requeued(uuid[]);
-- issue 26: the children of a job after they stopped waiting
drop index if exists pgqueue.dependent_jobs_parents_idx;
