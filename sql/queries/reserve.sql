-- The worker's batched reservation. The envelope comes as text: the worker decodes and
-- validates each one in its own execution, so no row can break the fetch of the batch.
select id, token, attempts, max_tries, lease_seconds_left, queue, envelope::text
from pgqueue.reserve(%s::text[], %s::integer, %s::double precision)
