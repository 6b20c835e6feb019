-- The failed attempts of one job for the dashboard (pgqueue.attempt_failures: each retried attempt
-- and each terminal failure, kept across retry_failed), newest first, at most %(limit)s rows, each
-- with how many the job has in all (counted up to %(count_cap)s: one job's range of the
-- (job_id, failed_at) index). Trimmed as a page shows them: the message's first 1,000 characters,
-- the traceback's last 4,000 (where the exception is), each with a flag saying it was cut.
select a.attempt, a.failed_at, a.reason, a.exception,
       left(a.message, 1000) as message, length(a.message) > 1000 as message_cut,
       right(a.traceback, 4000) as traceback, length(a.traceback) > 4000 as traceback_cut,
       a.worker, a.duration,
       (select count(*) from (select 1 from pgqueue.attempt_failures c
                              where c.job_id = %(job_id)s::uuid limit %(count_cap)s) counted) as total
from pgqueue.attempt_failures a
where a.job_id = %(job_id)s::uuid
order by a.failed_at desc, a.attempt desc
limit %(limit)s
