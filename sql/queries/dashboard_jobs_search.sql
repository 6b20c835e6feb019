-- One page of live jobs for the dashboard's search (issue 29), newest dispatch first, read by keyset
-- (after_id: the last id seen) like dashboard_jobs_page.sql: at most %(scan)s jobs after the cursor
-- are read, and the search is applied to those: the conditions of pgqueue.jobs_matching (queue, part
-- of the name, args containment, state, dispatch time), written out so that the planner evaluates
-- them inline (a call of that function per row costs several times the page; tests hold the two equal). Every row carries how many were read and the last.
with scanned as materialized (
    select j.id,
           (%(queue)s::text is null or j.queue = %(queue)s::text)
           and (%(name)s::text is null
                or strpos(lower(coalesce(j.envelope->>'name', '')), lower(%(name)s::text)) > 0)
           and (%(args)s::jsonb is null or coalesce(j.envelope->'args', '{}'::jsonb) @> %(args)s::jsonb)
           and (%(state)s::text is null or %(state)s::text = case
                    when j.token is not null and j.available_at > now() then 'reserved'
                    when j.token is not null then 'expired'
                    when j.available_at > now() then 'delayed'
                    else 'ready' end)
           and (%(since)s::timestamptz is null or j.created_at >= %(since)s::timestamptz)
           and (%(until)s::timestamptz is null or j.created_at < %(until)s::timestamptz) as hit
    from pgqueue.jobs j
    where (%(after_id)s::uuid is null or j.id < %(after_id)s::uuid)
    order by j.id desc
    limit %(scan)s
), hits as (
    select s.id from scanned s where s.hit order by s.id desc limit %(limit)s
)
select c.scanned, l.last_id,
       j.id, j.queue, j.priority, j.envelope->>'name' as name, j.attempts, j.max_tries,
       case when j.token is not null and j.available_at > now() then 'reserved'
            when j.token is not null then 'expired'
            when j.available_at > now() then 'delayed'
            else 'ready' end as state,
       j.available_at, j.created_at
from (select count(*) as scanned from scanned) c
left join lateral (select s.id as last_id from scanned s order by s.id limit 1) l on true
left join lateral (
    select j.* from hits h join pgqueue.jobs j on j.id = h.id
) j on true
order by j.id desc nulls last
