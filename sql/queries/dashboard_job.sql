-- One live job in full for the dashboard: its envelope, attempts and lease (token, reserved_at,
-- and for a reservation the seconds left on the lease, negative once it expired).
select j.id, j.queue, j.priority, j.envelope, j.attempts, j.max_tries, j.retry_until,
       case when j.token is not null and j.available_at > now() then 'reserved'
            when j.token is not null then 'expired'
            when j.available_at >= pgqueue.never() then 'blocked'  -- issue 26: waiting for parents or a batch
            when j.available_at > now() then 'delayed'
            else 'ready' end as state,
       j.available_at, j.reserved_at, j.token, j.created_at,
       case when j.token is not null
            then extract(epoch from j.available_at - now())::double precision end as lease_seconds_left
from pgqueue.jobs j
where j.id = %(job_id)s::uuid
