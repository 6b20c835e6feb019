-- issue 26: jobs just enqueued in this transaction become a batch (batch id, members, callback).
select pgqueue.add_batch(%s::uuid, %s::uuid[], %s::uuid)
