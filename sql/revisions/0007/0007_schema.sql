-- pgqueue schema, revision 0007 (issue 18): prefetch does not spend a try the job never ran.
-- Executed by the alembic revision 0007 (migrations/versions/), before its functions.
--
-- A worker may reserve more jobs than it has free slots and buffer the rest (prefetch). Their
-- attempts are counted at reservation like every other, so a worker that died with a full
-- buffer spent a try of each buffered job although none of them ran; a job with tries = 1 then
-- failed unrun. reserve now marks the buffered jobs (prefetched) until their worker reports that
-- it started them (mark_started, sent with its acks); an expired lease still marked gives the
-- attempt back, once per job (refunded), so a job that kills its worker as it starts still
-- runs out of tries.
alter table pgqueue.jobs
    add column prefetched boolean not null default false,
    add column refunded boolean not null default false;
comment on column pgqueue.jobs.prefetched is
    'pgqueue: reserved into a worker''s prefetch buffer and not yet reported started (pgqueue.mark_started).';
comment on column pgqueue.jobs.refunded is
    'pgqueue: an attempt of this job was given back once because its prefetched reservation expired unstarted.';
