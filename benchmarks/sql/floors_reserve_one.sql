-- The leanest fenced reservation of one ready job, as one statement: no queue controls, one
-- priority, no check of tries or deadline (what pgqueue.reserve does besides). Any design that
-- reserves after the wake-up pays at least this round trip, and its commit (benchmarks/floors.py).
update pgqueue.jobs j
set attempts = j.attempts + 1,
    token = nextval('pgqueue.lease_token_seq'),
    reserved_at = now(),
    due_at = j.available_at,
    available_at = now() + interval '60 seconds'
where j.id = (select c.id from pgqueue.jobs c
              where c.queue = 'default' and c.priority = 0 and c.available_at <= now()
              order by c.available_at
              limit 1
              for update skip locked)
returning j.id, j.token, j.envelope::text
