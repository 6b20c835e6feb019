-- The queue controls an operator set (pgqueue.pause, pgqueue.set_limits, and issue 28's
-- pgqueue.set_partition_limits), by queue name. rate_burst null: the token bucket holds the rate per period.
select q.name, q.paused, q.concurrency, q.rate_limit, extract(epoch from q.rate_period)::double precision,
       q.rate_burst, q.partition_concurrency, q.partition_rate_limit,
       extract(epoch from q.partition_rate_period)::double precision, q.partition_rate_burst, q.partition_fair
from pgqueue.queues q order by q.name
