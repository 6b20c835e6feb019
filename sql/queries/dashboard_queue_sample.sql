-- Estimated per-queue counts for the dashboard when an exact count stopped at its cap
-- (dashboard_queues.sql): the states of the rows on a random sample of about %(pages)s pages of
-- pgqueue.jobs (TABLESAMPLE SYSTEM: whole pages, so the cost is those pages, whatever the table's
-- size). Every row carries the sampled percentage (a single row of nulls besides it when the sample
-- saw no job): a count divided by percent / 100 estimates the table's. The size in pages is read
-- from the relation itself, so it is current even before the first ANALYZE.
-- REPEATABLE: the same pages while the table is unchanged, so an unchanging backlog shows an
-- unchanging estimate instead of one that jitters with every refresh.
with sample as (
    select least(100.0, 100.0 * %(pages)s
                 / greatest(pg_relation_size('pgqueue.jobs') / current_setting('block_size')::bigint, 1))::real
           as percent
)
select sample.percent::double precision, g.queue, g.ready, g.delayed, g.blocked, g.reserved, g.expired
from sample
left join lateral (
    select s.queue,
           count(*) filter (where s.token is null and s.available_at <= now())     as ready,
           count(*) filter (where s.token is null and s.available_at > now()
                                              and s.available_at < pgqueue.never()) as delayed,
           count(*) filter (where s.token is null and s.available_at >= pgqueue.never()) as blocked,
           count(*) filter (where s.token is not null and s.available_at > now())  as reserved,
           count(*) filter (where s.token is not null and s.available_at <= now()) as expired
    from pgqueue.jobs s tablesample system (sample.percent) repeatable (29)
    group by s.queue
) g on true
order by g.queue
