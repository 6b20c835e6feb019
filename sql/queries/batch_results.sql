-- issue 26: a batch's members (by batch or callback id), how each ended and its kept result.
select job_id, outcome, result from pgqueue.batch_results(%s::uuid)
