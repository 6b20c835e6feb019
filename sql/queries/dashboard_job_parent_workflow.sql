-- issue 27: the workflow that dispatched a job as its child (context.run), for the job's page: the
-- workflow's id and name (from its live job, else its result or failure record) and the step's seq and
-- name. No row: the job is no workflow's child (or that workflow's steps were pruned).
select s.job_id, s.seq, s.name as step,
       coalesce((select j.envelope->>'name' from pgqueue.jobs j where j.id = s.job_id),
                (select r.name from pgqueue.job_results r where r.job_id = s.job_id),
                (select f.envelope->>'name' from pgqueue.failed_jobs f where f.job_id = s.job_id
                 order by f.failed_at desc limit 1)) as name
from pgqueue.workflow_steps s
where s.child_id = %(job_id)s::uuid
order by s.started_at
limit 1
