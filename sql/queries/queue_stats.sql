-- Per queue: the counts of the pgqueue.queue_stats view, the jobs waiting for parents or a batch
-- (issue 26: available_at = pgqueue.never()) counted as blocked, apart from delayed; blocked comes
-- last (QueueStats' field order).
select queue, ready, delayed, reserved, expired, failed, extract(epoch from oldest_ready_age)::double precision,
       blocked
from pgqueue.queue_stats order by queue
