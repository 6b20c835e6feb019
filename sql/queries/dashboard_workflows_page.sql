-- issue 27: one page of live workflows for the dashboard's /workflows, newest dispatch first, read by
-- keyset (after_id: the last id seen) over pgqueue.jobs like dashboard_jobs_search.sql: at most
-- %(scan)s jobs after the cursor (the window) are read, newest first, and left at the %(limit)s-th
-- match. A job of the window is a workflow when its envelope carries "workflow" (its version); only
-- those (and of the name asked, a part of it, case-insensitive) look up their last checkpoint (one
-- index probe each), whose kind and state give the workflow's state as the view pgqueue.workflows
-- says it (running, sleeping, waiting_signal, waiting_child, delayed, waiting: due, not reserved).
-- wake_at: when a parked workflow is due (a sleep's end, a signal wait's timeout; null: no timeout).
-- As in dashboard_jobs_search.sql, only a page that is not full reads the rest of the window, for
-- one more row: a null id, how many rows the window held (scanned) and its last id.
with scanned as (
    select j.id, j.queue, j.envelope->>'name' as name, (j.envelope->>'workflow')::integer as version,
           j.attempts, j.max_tries, j.token, j.available_at, j.created_at,
           row_number() over (order by j.id desc) as n,
           j.envelope ? 'workflow'
           and (%(name)s::text is null
                or strpos(lower(coalesce(j.envelope->>'name', '')), lower(%(name)s::text)) > 0) as candidate
    from pgqueue.jobs j
    where (%(after_id)s::uuid is null or j.id < %(after_id)s::uuid)
    order by j.id desc
    limit %(scan)s
), placed as (
    select c.*, s.seq as step_seq, s.name as step_name, s.kind as step_kind, s.state as step_state,
           case when s.state = 'waiting' then s.signal end as awaited_signal,
           case when s.state = 'waiting' then s.child_id end as awaited_child,
           case when c.token is not null then 'running'
                when s.state = 'waiting' and s.kind = 'sleep' then 'sleeping'
                when s.state = 'waiting' and s.kind = 'signal' then 'waiting_signal'
                when s.state = 'waiting' and s.kind = 'child' then 'waiting_child'
                when c.available_at > now() then 'delayed'
                else 'waiting' end as state
    from scanned c
    left join lateral (select w.seq, w.name, w.kind, w.state, w.signal, w.child_id from pgqueue.workflow_steps w
                       where w.job_id = c.id order by w.seq desc limit 1) s on true
    where c.candidate
), hits as (
    -- No ORDER BY: the rows come in the window's order (newest first); a sort would read it whole.
    select p.* from placed p where %(state)s::text is null or p.state = %(state)s::text limit %(limit)s
)
select h.n, h.id, h.queue, h.name, h.version, h.state, h.step_seq, h.step_name, h.step_kind, h.step_state,
       h.awaited_signal, h.awaited_child,
       case when h.token is null and h.available_at < pgqueue.never() then h.available_at end as wake_at,
       h.attempts, h.max_tries, h.created_at,
       null::bigint as scanned, null::uuid as last_id
from hits h
union all
select null, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null,
       count(*), (array_agg(s.id order by s.n desc))[1]
from scanned s
where (select count(*) from hits) < %(limit)s       -- the gate: not read at all otherwise
having (select count(*) from hits) < %(limit)s      -- and no row then (an aggregate makes one of nothing)
order by id desc nulls last
