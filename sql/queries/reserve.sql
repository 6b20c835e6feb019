-- The worker's batched reservation: the first run_now jobs start at once, the rest wait in its
-- prefetch buffer (prefetched = true until it reports them started with mark_started). The
-- envelope comes as text: the worker decodes and validates each one in its own execution, so
-- no row can break the fetch of the batch. queued_seconds (from the job's due time to this
-- reservation, database clock) starts the queue latency the worker's metrics count.
-- waiting (issue 28, slot handover): granted beyond a limited queue's free slots, up to the
-- caller's count for that queue (null: none); it starts only in a slot handed over.
select id, token, attempts, max_tries, lease_seconds_left, queue, envelope::text, prefetched, queued_seconds, waiting
from pgqueue.reserve(%s::text[], %s::integer, %s::double precision, %s::integer, %s::integer[])
