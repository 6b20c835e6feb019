-- issue 27: one workflow for /workflows/<id>: while it lives, its job (envelope, lease) and its state as
-- pgqueue.workflows says it; once ended, how (pgqueue.job_results: succeeded, with its result; else its
-- newest failure: failed or cancelled, with the failure's id and message). The result as JSON text
-- while it is at most 65,536 bytes (result_bytes: its size). No row: no workflow of that
-- id is live or kept (not a workflow, or unknown, or its checkpoints were pruned). Ended with neither a
-- result nor a failure record kept (it kept no result, or its failure was forgotten): 'ended', its
-- steps pruned by the next maintenance.
select k.id, j.id is not null as live,
       coalesce(j.envelope, f.envelope) as envelope, coalesce(j.queue, r.queue, f.queue) as queue,
       coalesce(j.envelope->>'name', r.name, f.envelope->>'name') as name,
       (coalesce(j.envelope, f.envelope)->>'workflow')::integer as version,
       case when j.id is null then null
            when j.token is not null then 'running'
            when s.state = 'waiting' and s.kind = 'sleep' then 'sleeping'
            when s.state = 'waiting' and s.kind = 'signal' then 'waiting_signal'
            when s.state = 'waiting' and s.kind = 'child' then 'waiting_child'
            when j.available_at > now() then 'delayed'
            else 'waiting' end as state,
       case when j.id is not null then null when r.job_id is not null then 'succeeded'
            when f.reason = 'cancelled' then 'cancelled' when f.job_id is not null then 'failed'
            else 'ended' end as outcome,
       case when j.token is null and j.available_at < pgqueue.never() then j.available_at end as wake_at,
       case when s.state = 'waiting' then s.signal end as awaited_signal,
       case when s.state = 'waiting' then s.child_id end as awaited_child,
       coalesce(j.attempts, r.attempts, f.attempts) as attempts, j.max_tries, j.token, j.created_at,
       case when octet_length(r.result::text) <= 65536 then r.result::text end as result,
       octet_length(r.result::text) as result_bytes, coalesce(r.finished_at, f.failed_at) as ended_at,
       f.id as failure_id, f.message as failure_message
from (select %(job_id)s::uuid as id) k
left join pgqueue.jobs j on j.id = k.id and j.envelope ? 'workflow'
left join pgqueue.job_results r on r.job_id = k.id and j.id is null
left join lateral (select x.id, x.job_id, x.queue, x.envelope, x.reason, x.failed_at, x.attempts, x.message
                   from pgqueue.failed_jobs x
                   where x.job_id = k.id and j.id is null and r.job_id is null and x.envelope ? 'workflow'
                   order by x.failed_at desc limit 1) f on true
left join lateral (select w.seq, w.kind, w.state, w.signal, w.child_id from pgqueue.workflow_steps w
                   where w.job_id = k.id order by w.seq desc limit 1) s on true
where j.id is not null or f.job_id is not null
   or exists (select 1 from pgqueue.workflow_steps w where w.job_id = k.id)
