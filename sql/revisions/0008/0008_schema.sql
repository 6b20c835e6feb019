-- pgqueue schema, revision 0008: the surfaces of revisions 0003-0007 hardened against adversarial
-- input (unique keys under REPEATABLE READ, queue names, ticks the database decides, a cancel the
-- database recorded, failure records that always store). Executed by the alembic revision 0008
-- (migrations/versions/), before its functions.

-- Issue 24, item 4: an attempt the worker itself interrupts (a forced stop) is given back, not
-- retried (pgqueue.release_interrupted): the history counts it apart.
alter table pgqueue.job_stats add column given_back bigint not null default 0;
comment on column pgqueue.job_stats.given_back is
    'pgqueue: attempts the worker interrupted (a forced stop) and gave back with their try (pgqueue.release_interrupted).';
