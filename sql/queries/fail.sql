-- A terminal failure: the handler's run time and the wait from reservation to handler start go
-- to pgqueue.job_stats (null when unknown, e.g. no handler ran).
select pgqueue.fail(%s::uuid, %s::bigint, %s, %s, %s, %s, %s::double precision, %s::double precision)
