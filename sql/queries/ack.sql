-- The completer's batched acknowledgement; returns only the refused ones.
select id from pgqueue.ack(%s::uuid[], %s::bigint[]) where not acked
