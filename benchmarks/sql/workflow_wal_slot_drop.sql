-- The phase's WAL has been read: let the server recycle it.
select pg_drop_replication_slot(%s)
