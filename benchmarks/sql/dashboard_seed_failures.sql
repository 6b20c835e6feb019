-- The dashboard benchmark's failures: %(failures)s records over 7 days, 5 queues, 7 job names and
-- 3 reasons; one job name ("app:rare") is 1 in 1000 of them, to measure a filter that matches little.
insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, exception, message, traceback,
                                 reason, failed_at)
select gen_random_uuid(), 'database', (array['default', 'emails', 'reports', 'webhooks', 'exports'])[1 + mod(i, 5)],
       jsonb_build_object('name', case when mod(i, 1000) = 0 then 'app:rare' else 'app:job_' || (mod(i, 7)) end,
                          'args', jsonb_build_object('n', i), 'tries', 3, 'version', 1),
       3, 'app.errors.Boom', 'boom number ' || i,
       'Traceback (most recent call last):' || repeat(E'\n  File "app.py", line 1, in handle', 20),
       (array['exception', 'attempts_exhausted', 'failed_by_handler'])[1 + mod(i, 3)],
       now() - make_interval(secs => (i * 6.048)::int)
from generate_series(1, %(failures)s) as i
