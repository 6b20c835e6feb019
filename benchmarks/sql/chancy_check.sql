-- chancy keeps finished jobs (its pruner removes them after a day): every job succeeded, each
-- after one attempt.
select count(*), count(*) filter (where state = 'succeeded'), coalesce(max(attempts), 0)
from chancy_jobs
where queue = 'bench'
