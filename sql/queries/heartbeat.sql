-- The worker's lease heartbeat: every running handler's lease in one statement. The arrays
-- go in binary (%b), like ack's.
select id, renewed, lease_seconds_left
from pgqueue.heartbeat(%b::uuid[], %b::bigint[], %s::double precision)
