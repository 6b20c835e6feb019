-- A retry (or a handler's own release): the handler's run time and the wait from reservation to
-- handler start go to pgqueue.job_stats (null when unknown).
select pgqueue.release(%s::uuid, %s::bigint, %s::double precision, %s::double precision, %s::double precision)
