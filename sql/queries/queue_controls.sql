-- The queue controls an operator set (pgqueue.pause, pgqueue.set_limits), by queue name.
select q.name, q.paused, q.concurrency, q.rate_limit, extract(epoch from q.rate_period)::double precision
from pgqueue.queues q order by q.name
