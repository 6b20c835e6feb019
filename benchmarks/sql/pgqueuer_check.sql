-- PgQueuer deletes finished jobs and writes one log row per final status.
select (select count(*) from pgqueuer),
       (select count(*) from pgqueuer_log where status = 'successful'),
       (select count(distinct job_id) from pgqueuer_log where status = 'successful')
