-- procrastinate keeps finished jobs (delete_jobs defaults to "never") and logs a 'started'
-- event per execution: every job succeeded, and was started exactly once.
select (select count(*) from procrastinate_jobs),
       (select count(*) from procrastinate_jobs where status = 'succeeded'),
       (select count(*) from procrastinate_events where type = 'started'),
       (select count(distinct job_id) from procrastinate_events where type = 'started')
