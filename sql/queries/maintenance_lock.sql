-- Table maintenance: only one session of the database vacuums pgqueue.jobs at a time. A
-- session-level advisory lock on the key pgqueue.worker.maintenance.VACUUM_LOCK_KEY
-- (0x7067717565756501, "pgqueue" and 1); false: another worker holds it, skip this round.
select pg_try_advisory_lock(%s::bigint)
