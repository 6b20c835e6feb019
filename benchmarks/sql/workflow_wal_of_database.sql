-- WAL between two positions that belongs to the current database (pg_walinspect; the caller holds
-- a replication slot so that the segments are still there): the records on its blocks
-- ("rel <tablespace>/<database>/<relation>" in block_ref) and every record of the transactions
-- that wrote them (their commit records carry no block). Bytes, and those transactions' commit
-- records (the durable commits: a read-only transaction writes none), and the bytes of full-page
-- images among them (the first change of a page after each checkpoint: they depend on how often
-- the server checkpoints, which on a shared server other sessions decide).
with records as (
    select xid, resource_manager, record_type, record_length, fpi_length, block_ref
    from pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)
),
pattern as (
    select '%% rel %%/' || oid || '/%%' as ours from pg_database where datname = current_database()
),
writers as (
    select distinct r.xid from records r, pattern p where r.xid <> 0 and r.block_ref like p.ours
),
mine as (
    select r.* from records r, pattern p
    where r.block_ref like p.ours or (r.xid <> 0 and r.xid in (select xid from writers))
)
select coalesce(sum(record_length), 0)::float8,
       count(*) filter (where resource_manager = 'Transaction' and record_type like 'COMMIT%%')::float8,
       coalesce(sum(fpi_length), 0)::float8
from mine
