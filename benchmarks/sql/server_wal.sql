-- WAL position and the server's WAL counters (pg_stat_wal exists from PostgreSQL 14 on; the
-- caller falls back to the position alone where it does not).
select pg_current_wal_lsn(), w.wal_records, w.wal_fpi, w.wal_bytes
from pg_stat_wal w
