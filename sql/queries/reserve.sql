-- The worker's batched reservation: the first run_now jobs start at once, the rest wait in its
-- prefetch buffer (prefetched = true until it reports them started with mark_started). The
-- envelope comes as text: the worker decodes and validates each one in its own execution, so
-- no row can break the fetch of the batch. queued_seconds (from the job's due time to this
-- reservation, database clock) starts the queue latency the worker's metrics count.
-- Slot heirs (issue 28, revision 0014): the worker's running jobs (ids, then tokens; null: none);
-- beyond a limited queue's free slots, one of them may get a waiting job (heir_of names it), which
-- starts when that job's execution has ended. No p_waiting: this worker never calls hand_over.
select id, token, attempts, max_tries, lease_seconds_left, queue, envelope::text, prefetched, queued_seconds,
       waiting, heir_of
from pgqueue.reserve(%s::text[], %s::integer, %s::double precision, %s::integer, null, %s::uuid[], %s::bigint[])
