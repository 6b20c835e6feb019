-- Which queues an operator controls, and whether each is paused (pgqueue.pause / pgqueue.resume):
-- the metrics' paused gauge, sampled with the queue depths. A queue without a row is not paused.
select q.name, q.paused from pgqueue.queues q order by q.name
