-- The workers' maintenance (issue 28): one batch of partition rows no limit needs any more.
select pgqueue.prune_partitions(%s::integer)
