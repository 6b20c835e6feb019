-- One page of live jobs for the dashboard, newest dispatch first (job ids are time-ordered
-- UUIDs, so the primary key is the dispatch order), filtered by queue and job name, read by
-- keyset (after_id: the last id seen). Bounded like dashboard_failed_page.sql: at most
-- %(scan)s jobs after the cursor are read; every row carries how many were read and the last
-- of them. State: reserved (a live lease), expired (a lease that ran out), blocked (waiting for
-- parents or a batch: available_at = pgqueue.never()), delayed, ready.
with scanned as materialized (
    select j.id,
           (%(queue)s::text is null or j.queue = %(queue)s::text)
           and (%(name)s::text is null or j.envelope->>'name' = %(name)s::text) as hit
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
            when j.available_at >= '9999-01-01 00:00:00+00'::timestamptz then 'blocked'  -- issue 26
            when j.available_at > now() then 'delayed'
            else 'ready' end as state,
       j.available_at, j.created_at
from (select count(*) as scanned from scanned) c
left join lateral (select s.id as last_id from scanned s order by s.id limit 1) l on true
left join lateral (
    select j.* from hits h join pgqueue.jobs j on j.id = h.id
) j on true
order by j.id desc nulls last
