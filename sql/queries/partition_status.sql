-- Issue 28: per partition of a queue: running, waiting, delayed, limits, weight and adaptive bounds;
-- busiest first.
select s.partition, s.running, s.waiting, s.delayed, s.concurrency, s.rate_limit, s.rate_period_seconds, s.weight,
       s.overridden, s.adaptive_min, s.adaptive_max
from pgqueue.partition_status(%s::text) s
order by s.running + s.waiting desc, s.partition
limit %s::integer
