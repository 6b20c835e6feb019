-- A page of the dashboard's job search when the scan window holds a whole page of matches (issue
-- 29): the window and the conditions of dashboard_jobs_search.sql, read newest first and stopped at
-- the %(limit)s-th match, so a search most jobs pass (a queue, a common state) reads a page's worth
-- of rows instead of the whole window of %(scan)s. n is a match's position in the window (the last
-- row's: how many rows were read). Fewer than %(limit)s rows back: the window holds fewer matches,
-- and dashboard_jobs_search.sql reads it whole, saying how far it read. Keep the two in step.
select w.n, w.id, w.queue, w.priority, w.name, w.attempts, w.max_tries, w.state, w.available_at, w.created_at
from (
    select j.id, j.queue, j.priority, j.envelope->>'name' as name, j.attempts, j.max_tries,
           case when j.token is not null and j.available_at > now() then 'reserved'
                when j.token is not null then 'expired'
                when j.available_at > now() then 'delayed'
                else 'ready' end as state,
           j.available_at, j.created_at,
           row_number() over (order by j.id desc) as n,
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
) w
where w.hit
order by w.id desc
limit %(limit)s
