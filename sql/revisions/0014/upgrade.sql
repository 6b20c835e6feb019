-- pgqueue revision 0014: the table changes of the next features (each function's new version,
-- functions/<name>/0014.sql, runs after this file).

-- issue 28, slot heirs: a job granted beyond its queue's free slots may be granted as an heir in a
-- slot its caller holds, known by the reservation that took it (heir_of, heir_of_token: that job's id
-- and token). A queue's limit counts slots: a job and its heirs hold one, from the first reservation
-- until the last of them ends, so a limited queue's slot passes from job to job with no write of its
-- own. Constant defaults (null): no rewrite. The index finds a slot's heirs (is it still held?).
alter table pgqueue.jobs add column heir_of uuid;
alter table pgqueue.jobs add column heir_of_token bigint;
comment on column pgqueue.jobs.heir_of is
    'pgqueue: an heir (reserve p_heirs): the job whose reservation took the slot it runs in, after that job and the heirs before it.';
comment on column pgqueue.jobs.heir_of_token is
    'pgqueue: the token of heir_of''s reservation that took the slot (a later reservation of that job is another slot).';
create index jobs_heir_idx on pgqueue.jobs (heir_of) where heir_of is not null;
