-- oban keeps finished jobs (its pruner removes them after a day): every job completed, each on
-- its first attempt.
select count(*), count(*) filter (where state = 'completed'), coalesce(max(attempt), 0)
from oban_jobs
where queue = 'bench'
