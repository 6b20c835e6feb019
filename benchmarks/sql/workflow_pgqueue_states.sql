-- pgqueue workflows by state: the live ones (pgqueue.workflows; a finished workflow's job row is
-- gone) and the failed ones.
select state, count(*) from pgqueue.workflows group by state
union all
select 'failed', count(*) from pgqueue.failed_jobs
