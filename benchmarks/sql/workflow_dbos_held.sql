-- DBOS workflows an executor holds (PENDING: dequeued and running, asleep or waiting; they count
-- against their queue's concurrency).
select count(*) from dbos.workflow_status where status = 'PENDING'
