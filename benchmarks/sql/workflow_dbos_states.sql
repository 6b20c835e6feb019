-- DBOS workflows by status.
select status, count(*) from dbos.workflow_status group by status order by status
