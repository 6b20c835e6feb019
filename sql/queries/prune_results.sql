-- issue 26: the workers' maintenance: one batch of expired results and of the failed attempts of
-- jobs that are gone, and of the dependency and batch rows of jobs gone (links_deleted).
select results_deleted, attempts_deleted, links_deleted from pgqueue.prune_results(%s::double precision, %s::integer)
