-- Statements executed in the current database since the reset (pg_stat_statements, where loaded).
select sum(calls) from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
