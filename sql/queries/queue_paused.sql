-- Which queues an operator controls, whether each is paused (pgqueue.pause / pgqueue.resume) and its
-- current concurrency limit (null: none; adaptive queues move it): the metrics' paused and limit
-- gauges, sampled with the queue depths. A queue without a row is not paused and has no limit.
select q.name, q.paused, q.concurrency from pgqueue.queues q order by q.name
