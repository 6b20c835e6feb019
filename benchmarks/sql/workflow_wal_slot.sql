-- A temporary physical replication slot, reserving WAL from now on until this session ends or
-- drops it, so that pg_walinspect can still read a phase's WAL on a busy server (whose
-- checkpoints recycle segments within seconds). Returns the position it reserves from.
select lsn from pg_create_physical_replication_slot(%s, true, true)
