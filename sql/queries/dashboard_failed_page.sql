-- One page of failures for the dashboard, newest first (failed_at desc, id desc), filtered by
-- queue, job name, reason and time, read by keyset (after_at, after_id: the last row seen).
-- Bounded: at most %(scan)s failures after the cursor are read (by failed_jobs_failed_at_idx or,
-- with a queue, failed_jobs_queue_failed_at_idx); the job name and reason filters are applied to
-- those. Besides the matching rows (at most %(limit)s), every row carries how many failures were
-- read and the oldest of them, so a page that found few matches can continue from there.
-- With no match at all, a single row of nulls carries those two.
with scanned as materialized (
    select f.id, f.failed_at,
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
    select s.id from scanned s where s.hit order by s.failed_at desc, s.id desc limit %(limit)s
)
select c.scanned, l.last_at, l.last_id,
       f.id, f.job_id, f.queue, f.envelope->>'name' as name, f.attempts, f.exception,
       left(f.message, 300) as message, length(f.message) > 300 as message_cut, f.reason, f.failed_at, f.envelope->'args' as args
from (select count(*) as scanned from scanned) c
left join lateral (
    select s.failed_at as last_at, s.id as last_id from scanned s order by s.failed_at, s.id limit 1
) l on true
left join lateral (
    select f.* from hits h join pgqueue.failed_jobs f on f.id = h.id
) f on true
order by f.failed_at desc nulls last, f.id desc
