-- Every user table of the measured database (each holds one system only): dead and live tuples,
-- table and index bytes; and the table with the most dead tuples.
select coalesce(sum(n_dead_tup), 0)::bigint, coalesce(sum(n_live_tup), 0)::bigint,
       coalesce(sum(pg_table_size(relid)), 0)::bigint, coalesce(sum(pg_indexes_size(relid)), 0)::bigint,
       (select schemaname || '.' || relname from pg_stat_user_tables order by n_dead_tup desc limit 1)
from pg_stat_user_tables
