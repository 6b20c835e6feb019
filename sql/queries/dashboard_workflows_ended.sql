-- issue 27: one page of ended workflows whose checkpoints are still kept (a succeeded one's until its
-- result expires, a failed or cancelled one's while its failure record is), for /workflows?state=ended:
-- newest dispatch first, read by keyset over the first checkpoint of each workflow (the primary key
-- of pgqueue.workflow_steps, job_id then seq), at most %(scan)s workflows after the cursor, left at
-- the %(limit)s-th match like dashboard_workflows_page.sql. Ended: no row in pgqueue.jobs any more;
-- its outcome from pgqueue.job_results (succeeded) or its newest failure (failed, or cancelled).
with scanned as (
    select s.job_id as id, s.started_at, row_number() over (order by s.job_id desc) as n
    from pgqueue.workflow_steps s
    where s.seq = 1 and (%(after_id)s::uuid is null or s.job_id < %(after_id)s::uuid)
    order by s.job_id desc
    limit %(scan)s
), placed as (
    select c.id, c.n, c.started_at, coalesce(r.name, f.envelope->>'name') as name,
           coalesce(r.queue, f.queue) as queue,
           case when r.job_id is not null then 'succeeded' when f.reason = 'cancelled' then 'cancelled'
                when f.job_id is not null then 'failed' else 'ended' end as outcome,
           coalesce(r.finished_at, f.failed_at) as ended_at, coalesce(r.attempts, f.attempts) as attempts,
           l.seq as step_seq, l.name as step_name, l.kind as step_kind, l.state as step_state
    from scanned c
    left join pgqueue.jobs j on j.id = c.id
    left join pgqueue.job_results r on r.job_id = c.id and j.id is null
    left join lateral (select x.job_id, x.queue, x.envelope, x.reason, x.failed_at, x.attempts
                       from pgqueue.failed_jobs x where x.job_id = c.id and j.id is null and r.job_id is null
                       order by x.failed_at desc limit 1) f on true
    left join lateral (select w.seq, w.name, w.kind, w.state from pgqueue.workflow_steps w
                       where w.job_id = c.id order by w.seq desc limit 1) l on j.id is null
    where j.id is null
), hits as (
    select p.* from placed p
    where %(name)s::text is null or strpos(lower(coalesce(p.name, '')), lower(%(name)s::text)) > 0
    limit %(limit)s
)
select h.n, h.id, h.queue, h.name, h.outcome, h.started_at, h.ended_at, h.attempts,
       h.step_seq, h.step_name, h.step_kind, h.step_state, null::bigint as scanned, null::uuid as last_id
from hits h
union all
select null, null, null, null, null, null, null, null, null, null, null, null,
       count(*), (array_agg(s.id order by s.n desc))[1]
from scanned s
where (select count(*) from hits) < %(limit)s
having (select count(*) from hits) < %(limit)s
order by id desc nulls last
