-- Jobs still in the queue table after a drain (acked jobs are deleted).
select count(*) from pgqueue.jobs
