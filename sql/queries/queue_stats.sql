-- Per queue: the counts of the pgqueue.queue_stats view (one scan of pgqueue.jobs, as the view
-- does), with the jobs waiting for parents or a batch (issue 26: available_at = pgqueue.never())
-- counted as blocked, apart from delayed; blocked comes last (QueueStats' field order).
with live as (
    select queue,
           count(*) filter (where token is null and available_at <= now())                   as ready,
           count(*) filter (where token is null and available_at > now()
                                               and available_at < pgqueue.never())           as delayed,
           count(*) filter (where token is null and available_at >= pgqueue.never())         as blocked,
           count(*) filter (where token is not null and available_at > now())                as reserved,
           count(*) filter (where token is not null and available_at <= now())               as expired,
           max(now() - available_at) filter (where token is null and available_at <= now())  as oldest_ready_age
    from pgqueue.jobs
    group by queue
), dead as (
    select queue, count(*) as failed from pgqueue.failed_jobs group by queue
)
select coalesce(live.queue, dead.queue), coalesce(live.ready, 0), coalesce(live.delayed, 0),
       coalesce(live.reserved, 0), coalesce(live.expired, 0), coalesce(dead.failed, 0),
       extract(epoch from live.oldest_ready_age)::double precision, coalesce(live.blocked, 0)
from live full join dead on dead.queue = live.queue
order by 1
