-- One job written the barest way: a plain INSERT into pgqueue.jobs (no function, no checks
-- beyond the table's) and its notification, one statement, one transaction
-- (benchmarks/floors.py: the floor under a single enqueue into this table).
with job as (
    insert into pgqueue.jobs (id, queue, priority, envelope, max_tries)
    values (%s::uuid, 'default', 0, %s::jsonb, 3)
    returning queue
)
select pg_notify('pgqueue', job.queue) from job
