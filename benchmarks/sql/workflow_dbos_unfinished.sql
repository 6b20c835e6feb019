-- DBOS workflows not finished yet (queued, delayed or running).
select count(*) from dbos.workflow_status where status in ('ENQUEUED', 'PENDING', 'DELAYED')
