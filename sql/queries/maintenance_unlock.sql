-- Table maintenance: release the lock taken by maintenance_lock.
select pg_advisory_unlock(%s::bigint)
