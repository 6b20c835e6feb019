-- The args of one job, to mask what its class declares secret (pgqueue/redaction.py) in its status
-- and failed attempts (issue 26: job:show, JobHandle.status): from its live row, else its latest
-- failure record, else its latest completed copy; no row when none of them is kept. Reads the
-- tables themselves (the schema owner, pgqueue_operator): a role that may not read them (a
-- least-privilege producer) is refused, and the caller then masks the attempts' texts whole.
select x.args
from (
    select j.envelope->'args' as args, 1 as rank from pgqueue.jobs j where j.id = %(job_id)s::uuid
    union all
    (select f.envelope->'args', 2 from pgqueue.failed_jobs f where f.job_id = %(job_id)s::uuid
     order by f.failed_at desc limit 1)
    union all
    (select c.envelope->'args', 3 from pgqueue.completed_jobs c where c.job_id = %(job_id)s::uuid
     order by c.finished_at desc limit 1)
) x
order by x.rank
limit 1
