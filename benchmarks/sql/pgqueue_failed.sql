-- Terminal failures recorded during a drain.
select count(*) from pgqueue.failed_jobs
