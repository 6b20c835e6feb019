-- The queue controls an operator set (pgqueue.pause, pgqueue.set_limits, issue 28's
-- pgqueue.set_partition_limits and pgqueue.set_adaptive_limit), by queue name. rate_burst null: the
-- token bucket holds the rate per period. concurrency is the current limit; adaptive_min and
-- adaptive_max (both null: not adaptive) bound where it moves; adaptive_decrease is the cut's factor;
-- partition_adaptive_min and _max bound every partition's limit (revision 0010). aging
-- (pgqueue.set_aging): seconds per priority level a ready job gains by waiting (null: none).
select q.name, q.paused, q.concurrency, q.rate_limit, extract(epoch from q.rate_period)::double precision,
       q.rate_burst, q.partition_concurrency, q.partition_rate_limit,
       extract(epoch from q.partition_rate_period)::double precision, q.partition_rate_burst, q.partition_fair,
       q.adaptive_min, q.adaptive_max, q.adaptive_decrease, q.partition_adaptive_min, q.partition_adaptive_max,
       extract(epoch from q.aging)::double precision
from pgqueue.queues q order by q.name
