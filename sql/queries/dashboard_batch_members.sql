-- issue 26: one page of a batch's members for the dashboard (keyset on the member's id, after
-- %(after)s when given): how each ended (null: not yet) and, while it has not, its state in
-- pgqueue.jobs (null: the row is gone, e.g. it failed and waits in failed_jobs for its end).
select m.job_id, m.outcome,
       case when j.id is null then null
            when j.token is not null then 'reserved'
            when j.available_at >= pgqueue.never() then 'blocked'
            when j.available_at > now() then 'delayed'
            else 'ready' end as state,
       j.envelope ->> 'name' as name
from pgqueue.batch_members m
left join pgqueue.jobs j on j.id = m.job_id and m.outcome is null
where m.batch_id = %(batch_id)s::uuid
  and (%(after)s::uuid is null or m.job_id > %(after)s::uuid)
order by m.job_id
limit %(limit)s
