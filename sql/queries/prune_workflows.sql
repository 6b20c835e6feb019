-- issue 27: the workers' maintenance: the steps and signals of at most this many workflows that are gone.
select pgqueue.prune_workflows(%s::integer)
