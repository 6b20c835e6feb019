-- Bytes of full-page images between two WAL positions (pg_walinspect, PostgreSQL 15+).
select sum(fpi_size)::float8
from pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn, false)
