-- The worker's batched reservation.
select id, token, attempts, max_tries, lease_seconds_left, queue, envelope
from pgqueue.reserve(%s::text[], %s::integer, %s::double precision)
