-- The database's WAL between two positions (what workflow_wal_of_database.sql sums: the records on
-- its blocks and every record of the transactions that wrote them), by resource manager, record
-- type (its first word: "INSERT+INIT" stays apart from "INSERT") and relation (the first block's,
-- named through this database's pg_class; "-" for a record without a block, a commit): records,
-- bytes and full-page-image bytes. The caller holds a replication slot so that the WAL is still there.
with records as (
    select xid, resource_manager, record_type, record_length, fpi_length, block_ref
    from pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
),
pattern as (
    select '%% rel %%/' || oid || '/%%' as ours from pg_database where datname = current_database()
),
writers as (
    select distinct r.xid from records r, pattern p where r.xid <> 0 and r.block_ref like p.ours
),
mine as (
    select r.*, (regexp_match(r.block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid as node
    from records r, pattern p
    where r.block_ref like p.ours or (r.xid <> 0 and r.xid in (select xid from writers))
)
select m.resource_manager, split_part(m.record_type, ' ', 1) as record,
       coalesce(c.relname::text, m.node::text, '-') as relation,
       count(*)::float8 as records, sum(m.record_length)::float8 as bytes, sum(m.fpi_length)::float8 as fpi_bytes
from mine m
left join pg_class c on c.relfilenode = m.node
group by 1, 2, 3
order by 5 desc, 1, 2, 3
