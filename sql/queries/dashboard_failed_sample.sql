-- Estimated failures per queue for the dashboard when the exact count stopped at its cap
-- (dashboard_queues.sql): the failures on a random sample of about %(pages)s pages of
-- pgqueue.failed_jobs, with the sampled percentage on every row (see dashboard_queue_sample.sql).
-- REPEATABLE: the same pages while the table is unchanged, so an unchanging backlog shows an
-- unchanging estimate instead of one that jitters with every refresh.
with sample as (
    select least(100.0, 100.0 * %(pages)s
                 / greatest(pg_relation_size('pgqueue.failed_jobs') / current_setting('block_size')::bigint, 1))::real
           as percent
)
select sample.percent::double precision, g.queue, g.failed
from sample
left join lateral (
    select s.queue, count(*) as failed
    from pgqueue.failed_jobs s tablesample system (sample.percent) repeatable (29)
    group by s.queue
) g on true
order by g.queue
