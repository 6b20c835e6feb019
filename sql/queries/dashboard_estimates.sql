-- The planner's row estimates of pgqueue's two tables (pg_class.reltuples, kept by VACUUM and
-- ANALYZE): free to read, roughly right, and null until the table was first analyzed.
select c.relname::text, case when c.reltuples < 0 then null else c.reltuples::bigint end
from pg_class c
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'pgqueue' and c.relname in ('jobs', 'failed_jobs')
