-- The queues that have jobs or failures, distinct, read as loose index scans (one index probe
-- per queue, never a scan of the tables): over jobs_reservation_idx and
-- failed_jobs_queue_failed_at_idx. A worker warns when a queue it serves is not among them.
with recursive live(queue) as (
    (select queue from pgqueue.jobs order by queue limit 1)
    union all
    select (select j.queue from pgqueue.jobs j where j.queue > live.queue order by j.queue limit 1)
    from live where live.queue is not null
), failed(queue) as (
    (select queue from pgqueue.failed_jobs order by queue limit 1)
    union all
    select (select f.queue from pgqueue.failed_jobs f where f.queue > failed.queue order by f.queue limit 1)
    from failed where failed.queue is not null
)
select queue from live where queue is not null
union
select queue from failed where queue is not null
