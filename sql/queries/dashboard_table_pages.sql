-- The size in pages of pgqueue.jobs and pgqueue.failed_jobs, read from the relations themselves
-- (current even before the first ANALYZE): the dashboard counts a table exactly when it is at most
-- its exact_pages bound (reading it costs no more than that), and estimates from a sample beyond.
select c.relname::text, pg_relation_size(c.oid) / current_setting('block_size')::bigint
from pg_class c
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'pgqueue' and c.relname in ('jobs', 'failed_jobs')
