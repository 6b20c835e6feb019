-- Sustained run sample: rows in the queue, total size on disk, dead and live tuples, and
-- how often the table was vacuumed by autovacuum and by VACUUM (a worker's table maintenance).
select (select count(*) from pgqueue.jobs),
       pg_total_relation_size('pgqueue.jobs'),
       coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
       coalesce(s.autovacuum_count, 0), coalesce(s.vacuum_count, 0)
from pg_stat_user_tables s
where s.relid = 'pgqueue.jobs'::regclass
