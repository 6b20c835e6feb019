-- The dashboard benchmark's backlog: %(jobs)s jobs in 5 queues and 2 priorities, written straight
-- into pgqueue.jobs (what a million dispatches leave behind): 70 in 100 ready, 28 delayed, 1 reserved
-- under a live lease (they land in "default") and 1 whose lease expired (in "emails").
insert into pgqueue.jobs (id, queue, priority, envelope, attempts, max_tries, available_at, reserved_at, token,
                          created_at)
select gen_random_uuid(), q.queue, (mod(i, 2)) * 5,
       jsonb_build_object('name', 'app:job_' || (mod(i, 7)), 'args', jsonb_build_object('n', i, 'to', 'user' || i),
                          'queue', q.queue, 'tries', 3, 'version', 1),
       case when mod(i, 100) = 0 then 1 else 0 end, 3,
       case when mod(i, 100) = 0 then now() + interval '10 minutes'          -- reserved, live lease
            when mod(i, 100) = 1 then now() - interval '1 minute'            -- reserved, lease expired
            when mod(i, 100) < 30 then now() + make_interval(secs => mod(i, 86400))  -- delayed
            else now() - make_interval(secs => mod(i, 3600)) end,            -- ready
       case when mod(i, 100) < 2 then now() - interval '5 minutes' end,
       case when mod(i, 100) < 2 then i end,
       now() - make_interval(secs => mod(i, 7200))
from generate_series(1, %(jobs)s) as i
cross join lateral (select (array['default', 'emails', 'reports', 'webhooks', 'exports'])[1 + mod(i, 5)] as queue) q
