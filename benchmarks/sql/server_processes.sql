-- The server processes a phase is charged for: every backend of the measured database and the
-- background processes that write its WAL and pages (the caller's own backend is on another
-- database); with what each backend was doing, to count lock waits.
select pid, backend_type, state, wait_event_type
from pg_stat_activity
where datname = %s or backend_type = any(%s)
