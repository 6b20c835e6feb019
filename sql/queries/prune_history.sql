-- The workers' maintenance: one batch of expired history rows and completed jobs.
select stats_deleted, completed_deleted from pgqueue.prune_history(%s::double precision, %s::double precision, %s::integer)
