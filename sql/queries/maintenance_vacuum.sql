-- Table maintenance: reclaim the dead tuples of pgqueue.jobs. Runs on an autocommit session
-- (VACUUM cannot run in a transaction block or a function). SKIP_LOCKED: if a VACUUM (an
-- autovacuum worker, an operator) already holds the table, skip with a WARNING instead of
-- queueing behind it or cancelling an autovacuum.
vacuum (skip_locked) pgqueue.jobs
