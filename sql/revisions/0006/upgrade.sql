-- pgqueue schema, revision 0006 (issue 14): a rate limit is a real token bucket.
-- Executed by the alembic revision 0006 (migrations/versions/), before its functions.
--
-- Revision 0004 capped a queue's token bucket at one token, so a reservation on a queue limited
-- to 100/s took one job. rate_burst is the bucket's capacity: one reservation takes up to
-- min(free slots, tokens) jobs, and any window of T seconds sees at most rate * T + burst
-- reservations. Null means the default capacity: the rate per period (100 for 100/s).
alter table pgqueue.queues add column rate_burst integer;
alter table pgqueue.queues add constraint queues_rate_burst
    check (rate_burst is null or (rate_burst >= 1 and rate_limit is not null));
comment on column pgqueue.queues.rate_burst is
    'pgqueue: the token bucket''s capacity (most reservations at once); null: rate_limit, the rate per period.';

-- set_limits gains the burst (a fifth argument, default null): the four-argument function goes,
-- or a call with four arguments would be ambiguous.
drop function pgqueue.set_limits(text, integer, integer, double precision);
