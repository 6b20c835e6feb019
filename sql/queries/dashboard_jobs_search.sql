-- One page of live jobs for the dashboard's search (issue 29), newest dispatch first, read by keyset
-- (after_id: the last id seen) like dashboard_jobs_page.sql: at most %(scan)s jobs after the cursor
-- (the window) are read, and the search is applied to those: the conditions of pgqueue.jobs_matching
-- (queue, part of the name, args containment, state, dispatch time), written out so that the planner
-- evaluates them inline (a call of that function per row costs several times the page; tests hold
-- the two equal).
--
-- One pass, read no further than needed: the window is read newest first and left at the
-- %(limit)s-th match, so a search most jobs pass (a queue, a common state) reads a page's worth of
-- rows, not the whole window (a CTE's query runs only as far as its readers read). Each match
-- carries n, its place in the window. Only when the page is not full does the gate of the last
-- branch let it read the rest of the window, for one more row: a null id, how many rows the window
-- held (scanned) and its last id, from which the next page searches further back. A full page has
-- no such row (the store takes the last match's n as the rows read).
with scanned as (
    select j.id, j.queue, j.priority, j.envelope->>'name' as name, j.attempts, j.max_tries,
           case when j.token is not null and j.available_at > now() then 'reserved'
                when j.token is not null then 'expired'
                when j.available_at >= '9999-01-01 00:00:00+00'::timestamptz then 'blocked'  -- issue 26
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
                    when j.available_at >= '9999-01-01 00:00:00+00'::timestamptz then 'blocked'  -- issue 26
                    when j.available_at > now() then 'delayed'
                    else 'ready' end)
           and (%(since)s::timestamptz is null or j.created_at >= %(since)s::timestamptz)
           and (%(until)s::timestamptz is null or j.created_at < %(until)s::timestamptz) as hit
    from pgqueue.jobs j
    where (%(after_id)s::uuid is null or j.id < %(after_id)s::uuid)
    order by j.id desc
    limit %(scan)s
), hits as (
    -- No ORDER BY: a CTE scan returns its rows in the order its query made them (newest first), and
    -- a sort here would read the whole window before returning the first match.
    select s.* from scanned s where s.hit limit %(limit)s
)
select h.n, h.id, h.queue, h.priority, h.name, h.attempts, h.max_tries, h.state, h.available_at, h.created_at,
       null::bigint as scanned, null::uuid as last_id
from hits h
union all
select null, null, null, null, null, null, null, null, null, null, count(*), (array_agg(s.id order by s.n desc))[1]
from scanned s
where (select count(*) from hits) < %(limit)s       -- the gate: not read at all otherwise
having (select count(*) from hits) < %(limit)s      -- and no row then (an aggregate makes one of nothing)
order by id desc nulls last
