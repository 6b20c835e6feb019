-- pgqueue schema, revision 0004 (issue 14): queue controls and cancellation.
-- Executed by the alembic revision 0004 (migrations/versions/), before its functions.
--
-- pgqueue.queues holds what an operator set on a queue: paused, a global concurrency limit
-- (at most N jobs of the queue reserved at once, across every worker), and a rate limit (at
-- most rate_limit reservations per rate_period, a token bucket of capacity one token, so any
-- window of T seconds sees at most rate * T + 1 reservations). A queue without a row has no
-- control: the reservation pays one primary-key probe and nothing else.
create table pgqueue.queues (
    name             text             primary key,
    paused           boolean          not null default false,
    concurrency      integer,
    rate_limit       integer,
    rate_period      interval,
    -- The token bucket: tokens left at rate_refilled_at (0 to 1, the capacity).
    rate_tokens      double precision not null default 1,
    rate_refilled_at timestamptz      not null default now(),
    updated_at       timestamptz      not null default now(),
    constraint queues_concurrency_positive check (concurrency is null or concurrency >= 1),
    constraint queues_rate check ((rate_limit is null) = (rate_period is null)
                                  and (rate_limit is null or rate_limit >= 1)
                                  and (rate_period is null or rate_period > interval '0'))
);

comment on table pgqueue.queues is
    'pgqueue: per-queue controls (paused, concurrency and rate limits). Change rows only through pgqueue.pause, pgqueue.resume and pgqueue.set_limits.';

-- A cancelled job is a failure of its own reason: queryable and retryable like any other.
alter table pgqueue.failed_jobs drop constraint failed_jobs_reason;
alter table pgqueue.failed_jobs add constraint failed_jobs_reason check (reason in (
    'exception', 'attempts_exhausted', 'deadline_passed',
    'lease_expired_after_final_attempt', 'payload_invalid', 'unknown_job', 'failed_by_handler', 'cancelled'));
