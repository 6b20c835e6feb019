-- context.transaction(): the fenced ack of one job, inside the handler's own transaction.
select acked from pgqueue.ack(array[%s::uuid], array[%s::bigint])
