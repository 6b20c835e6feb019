-- explain_reservation: the candidate select of pgqueue.reserve (its newest sql/functions/reserve/NNNN.sql),
-- one queue and one priority level at a time, with the function's variables as parameters.
-- Not run by the library: the tests EXPLAIN it at a 1,000,000-row backlog to prove that it
-- is a range of jobs_reservation_idx (no sequential scan, no sort). Keep it identical to
-- the candidate subquery of reserve's newest version when that changes.
select j.id, j.available_at, j.attempts, j.max_tries, j.retry_until,
       (j.prefetched and j.token is not null)::integer as refund,
       (j.token is not null and not j.prefetched) as lost
from pgqueue.jobs j
where j.queue = %(queue)s and j.priority = %(priority)s and j.available_at <= %(now)s
order by j.available_at
limit %(limit)s
for update skip locked
