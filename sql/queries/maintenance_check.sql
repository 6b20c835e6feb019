-- The health of pgqueue.jobs, read by a worker's table maintenance every maintenance_interval
-- seconds (pgqueue/worker/maintenance.py): dead and live tuples; seconds since the last VACUUM
-- or autovacuum (null: never); whether autovacuum applies to the table (on server-wide and
-- not disabled by the table's autovacuum_enabled reloption); the dead-tuple threshold at which
-- autovacuum would act (the table's reloption, else the server's); whether the current role
-- may VACUUM it (PostgreSQL skips a table the role may not vacuum with a WARNING, not an
-- error: owner or database owner, or from PostgreSQL 17 the MAINTAIN privilege); and the role.
-- The columns are the fields of pgqueue.store.TableStatistics (read with class_row).
-- Everything here is readable without any privilege on the table.
select s.n_dead_tup as dead_tuples,
       s.n_live_tup as live_tuples,
       extract(epoch from clock_timestamp() - greatest(s.last_vacuum, s.last_autovacuum))::double precision as since_vacuum,
       current_setting('autovacuum')::boolean and coalesce(o.autovacuum_enabled, true) as autovacuum_applies,
       coalesce(o.vacuum_threshold, current_setting('autovacuum_vacuum_threshold')::bigint) as threshold,
       pg_has_role(d.datdba, 'USAGE')
           or case when current_setting('server_version_num')::int >= 170000
                   then has_table_privilege(c.oid, 'MAINTAIN')
                   else pg_has_role(c.relowner, 'USAGE')
              end as may_vacuum,
       current_user::text as role
from pg_catalog.pg_class c
join pg_catalog.pg_namespace n on n.oid = c.relnamespace
join pg_catalog.pg_stat_user_tables s on s.relid = c.oid
join pg_catalog.pg_database d on d.datname = current_database()
cross join lateral (
    select bool_and(case when split_part(r, '=', 1) = 'autovacuum_enabled'
                         then split_part(r, '=', 2)::boolean end) as autovacuum_enabled,
           max(case when split_part(r, '=', 1) = 'autovacuum_vacuum_threshold'
                    then split_part(r, '=', 2)::bigint end) as vacuum_threshold
    from unnest(c.reloptions) as r
) o
where n.nspname = 'pgqueue' and c.relname = 'jobs'
