-- issue 26: a dependent job's parents, in order, with their state as known and kept result.
select parent_id, state, result from pgqueue.parent_results(%s::uuid)
