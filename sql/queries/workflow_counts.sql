-- The live workflows by state (issue 27: the dashboard's overview, queue:status), from the view
-- pgqueue.workflows: at most %(cap)s + 1 workflows are read, through jobs_workflows_idx, each with
-- one probe for its last step, so the cost follows the cap, not the number of jobs or workflows. A
-- caller that counts cap + 1 in all knows there are more (the counts are then of a part of them).
select w.state, count(*)::bigint as workflows
from (select v.state from pgqueue.workflows v limit %(cap)s + 1) w
group by w.state
