-- One page of failures for the dashboard, newest first (failed_at desc, id desc), filtered by
-- queue, job name, reason and time, read by keyset (after_at, after_id: the last row seen).
-- Bounded: at most %(scan)s failures after the cursor are read (the window: by
-- failed_jobs_failed_at_idx or, with a queue, failed_jobs_queue_failed_at_idx); the job name and
-- reason filters are applied to those.
--
-- Read no further than needed (issue 29), as dashboard_jobs_search.sql: the window is left at the
-- %(limit)s-th match (a CTE's query runs only as far as its readers read), each match carrying n,
-- its place in the window. Only a page that is not full lets the gated last branch read the window
-- to its end, for one more row: a null id, how many failures were read (scanned) and the oldest of
-- them (last_at, last_id), from which the next page continues.
with scanned as (
    select f.id, f.failed_at, row_number() over (order by f.failed_at desc, f.id desc) as n,
           (%(name)s::text is null or f.envelope->>'name' = %(name)s::text)
           and (%(reason)s::text is null or f.reason = %(reason)s::text) as hit
    from pgqueue.failed_jobs f
    where (%(queue)s::text is null or f.queue = %(queue)s::text)
      and (%(since)s::timestamptz is null or f.failed_at >= %(since)s::timestamptz)
      and (%(until)s::timestamptz is null or f.failed_at < %(until)s::timestamptz)
      and (%(after_at)s::timestamptz is null
           or (f.failed_at <= %(after_at)s::timestamptz
               and (f.failed_at, f.id) < (%(after_at)s::timestamptz, %(after_id)s::uuid)))
    order by f.failed_at desc, f.id desc
    limit %(scan)s
), hits as (
    -- No ORDER BY: a CTE scan returns its rows in the order its query made them (newest first), and
    -- a sort here would read the whole window before returning the first match.
    select s.id, s.n from scanned s where s.hit limit %(limit)s
)
select h.n, f.id, f.job_id, f.queue, f.envelope->>'name' as name, f.attempts, f.exception,
       left(f.message, 300) as message, length(f.message) > 300 as message_cut, f.reason, f.failed_at,
       f.envelope->'args' as args,
       null::bigint as scanned, null::timestamptz as last_at, null::uuid as last_id
from hits h join pgqueue.failed_jobs f on f.id = h.id
union all
select null, null, null, null, null, null, null, null, null, null, null, null,
       count(*), (array_agg(s.failed_at order by s.n desc))[1], (array_agg(s.id order by s.n desc))[1]
from scanned s
where (select count(*) from hits) < %(limit)s       -- the gate: not read at all otherwise
having (select count(*) from hits) < %(limit)s      -- and no row then (an aggregate makes one of nothing)
order by failed_at desc nulls last, id desc
