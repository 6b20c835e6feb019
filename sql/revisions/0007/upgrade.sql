-- pgqueue schema, revision 0007 (issue 18): prefetch never makes a job fail unrun.
-- Executed by the alembic revision 0007 (migrations/versions/), before its functions.
--
-- A worker may reserve more jobs than it has free slots and buffer the rest (prefetch). Their
-- attempts are counted at reservation like every other, so a worker that died with a full
-- buffer spent a try of each buffered job although none of them ran; a job on its final try
-- (every job with tries = 1) then failed unrun. reserve now marks the buffered jobs on their
-- final try (prefetched); their worker clears the mark (mark_started, committed with its acks)
-- before it starts one. An expired lease still marked therefore belongs to a job that never
-- ran, and the next reservation gives that attempt back.
alter table pgqueue.jobs add column prefetched boolean not null default false;
comment on column pgqueue.jobs.prefetched is
    'pgqueue: on its final try in a worker''s prefetch buffer, not started yet (pgqueue.mark_started clears it first).';
