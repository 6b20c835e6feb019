-- The completer's batched acknowledgement; returns only the refused ones. The arrays go in
-- binary (%b): dumping them as text escapes every element.
select id from pgqueue.ack(%b::uuid[], %b::bigint[]) where not acked
