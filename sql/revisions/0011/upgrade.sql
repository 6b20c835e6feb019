-- pgqueue revision 0011: the table changes of the next features (each function's new version,
-- functions/<name>/0011.sql, runs after this file).

-- issue 27 (WAL): a reservation rewrites the job's row (token, lease, attempts). When the new
-- version lands on the old one's page, PostgreSQL logs only the bytes that changed (the envelope,
-- ahead of them in the row, is left out of the WAL record); on a full page it lands elsewhere and
-- the whole row, envelope included, goes into the WAL, with a lock record on the old version. Half
-- of each page is left free at insert for those new versions (PostgreSQL reclaims the dead ones as
-- it goes). New pages only: existing rows stay where they are.
alter table pgqueue.jobs set (fillfactor = 50);
-- A workflow's steps keep one index, their primary key (job_id, seq): the unique (job_id, name)
-- index cost an index entry per step (about 90 bytes of WAL each). The determinism guard's name
-- check stays in the fenced functions (workflow_checkpoint, workflow_step_failed, workflow_wait,
-- workflow_child), each under the job's row lock, reading the job's steps through the primary key.
alter table pgqueue.workflow_steps drop constraint workflow_steps_name_unique;
-- end issue 27 (WAL)
