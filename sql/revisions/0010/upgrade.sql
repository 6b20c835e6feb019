-- pgqueue revision 0010: what the next features keep in the database (filled in by their changes).
-- Executed by the alembic revision 0010 (migrations/versions/), before its functions.
select 1;
-- issue 26: the children of a job after they stopped waiting (pgqueue.job_family 0010), by parent id
create index dependent_jobs_parents_idx on pgqueue.dependent_jobs using gin (parents);
