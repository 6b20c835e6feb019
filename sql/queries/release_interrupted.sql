-- A forced stop interrupted the handler: the job goes back with its try; the handler's run time
-- and the wait from reservation to handler start go to pgqueue.job_stats (null when unknown).
select pgqueue.release_interrupted(%s::uuid, %s::bigint, %s::double precision, %s::double precision)
