-- The workers' maintenance: one batch of schedule ticks and expired unique keys no guarantee needs.
select ticks_deleted, keys_deleted from pgqueue.prune_ticks_and_keys(%s::integer)
