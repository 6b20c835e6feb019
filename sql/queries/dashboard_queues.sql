-- The dashboard's overview: per queue, ready / delayed / reserved / expired / failed counts and
-- the age of the oldest ready job, at a cost that does not grow with the backlog.
-- pgqueue.queue_stats counts every row (a sequential scan: 350 ms at 1M jobs); here each job count
-- reads at most %(cap)s + 1 rows of one index range, so a count above %(cap)s comes back as cap + 1
-- with its *_capped flag set, meaning "more than cap" (dashboard_queue_sample.sql then estimates it).
-- Failures are counted up to %(failed_cap)s + 1 per queue: an index-only scan of an append-mostly
-- table, cheap enough to count much further.
--   * the (queue, priority) pairs of pgqueue.jobs and the queues of pgqueue.failed_jobs are found
--     by a loose index scan (one probe of jobs_reservation_idx / failed_jobs_queue_failed_at_idx
--     per pair), not by reading the tables;
--   * per pair, the range available_at <= now() holds the ready jobs and the expired leases, the
--     range available_at > now() the delayed jobs and the live leases (see 0001_schema.sql);
--   * the oldest ready job is the first ready row of the due range, in available_at order;
--   * a job waiting for parents or a batch (issue 26) has available_at = pgqueue.never(): the
--     range from there holds the blocked jobs, counted apart (and not as delayed).
with recursive pairs (queue, priority) as (
    (select j.queue, j.priority from pgqueue.jobs j order by j.queue, j.priority limit 1)
    union all
    select n.queue, n.priority
    from pairs p
    cross join lateral (
        select j.queue, j.priority from pgqueue.jobs j
        where (j.queue, j.priority) > (p.queue, p.priority)
        order by j.queue, j.priority
        limit 1
    ) n
), failed_queues (queue) as (
    (select f.queue from pgqueue.failed_jobs f order by f.queue limit 1)
    union all
    select n.queue
    from failed_queues q
    cross join lateral (
        select f.queue from pgqueue.failed_jobs f where f.queue > q.queue order by f.queue limit 1
    ) n
), live as (
    select p.queue,
           sum(due.ready)::bigint         as ready,
           sum(due.expired)::bigint       as expired,
           bool_or(due.rows > %(cap)s)    as due_capped,
           sum(later.delayed)::bigint     as delayed,
           sum(later.reserved)::bigint    as reserved,
           bool_or(later.rows > %(cap)s)  as later_capped,
           min(due.oldest_ready)          as oldest_ready,
           sum(waits.blocked)::bigint     as blocked,
           bool_or(waits.blocked > %(cap)s) as blocked_capped
    from pairs p
    cross join lateral (
        select count(*) filter (where d.token is null)              as ready,
               count(*) filter (where d.token is not null)          as expired,
               count(*)                                             as rows,
               min(d.available_at) filter (where d.token is null)   as oldest_ready
        from (
            select j.token, j.available_at from pgqueue.jobs j
            where j.queue = p.queue and j.priority = p.priority and j.available_at <= now()
            order by j.available_at
            limit %(cap)s + 1
        ) d
    ) due
    cross join lateral (
        select count(*) filter (where l.token is null)      as delayed,
               count(*) filter (where l.token is not null)  as reserved,
               count(*)                                     as rows
        from (
            select j.token from pgqueue.jobs j
            where j.queue = p.queue and j.priority = p.priority and j.available_at > now()
              and j.available_at < pgqueue.never()
            order by j.available_at
            limit %(cap)s + 1
        ) l
    ) later
    cross join lateral (
        select count(*) as blocked
        from (
            select 1 from pgqueue.jobs j
            where j.queue = p.queue and j.priority = p.priority and j.available_at >= pgqueue.never()
              and j.token is null
            limit %(cap)s + 1
        ) w
    ) waits
    group by p.queue
), failed as (
    select q.queue, c.rows as failed, c.rows > %(failed_cap)s as failed_capped
    from failed_queues q
    cross join lateral (
        select count(*) as rows
        from (select 1 from pgqueue.failed_jobs f where f.queue = q.queue limit %(failed_cap)s + 1) x
    ) c
)
select coalesce(live.queue, failed.queue)                       as queue,
       coalesce(live.ready, 0)                                  as ready,
       coalesce(live.delayed, 0)                                as delayed,
       coalesce(live.reserved, 0)                               as reserved,
       coalesce(live.expired, 0)                                as expired,
       coalesce(failed.failed, 0)                               as failed,
       coalesce(live.due_capped, false)                         as due_capped,
       coalesce(live.later_capped, false)                       as later_capped,
       coalesce(failed.failed_capped, false)                    as failed_capped,
       extract(epoch from now() - live.oldest_ready)::double precision as oldest_ready_age,
       coalesce(live.blocked, 0)                                as blocked,
       coalesce(live.blocked_capped, false)                     as blocked_capped
from live full join failed on failed.queue = live.queue
order by 1
