-- Ready jobs (not reserved, due now).
select count(*) from pgqueue.jobs where token is null and available_at <= now()
