-- WAL position alone, where pg_stat_wal does not exist (before PostgreSQL 14).
select pg_current_wal_lsn(), null::bigint, null::bigint, null::numeric
