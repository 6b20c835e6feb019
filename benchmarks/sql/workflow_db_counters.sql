-- The measured database's transaction counters (pg_stat_database; a backend reports its own
-- when it is idle or exits) and the server's WAL position.
select xact_commit, xact_rollback, tup_inserted + tup_updated + tup_deleted, pg_current_wal_lsn()
from pg_stat_database
where datname = %s
