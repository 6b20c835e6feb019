-- Before starting buffered jobs granted as prefetched (their final try), the worker clears
-- their marks; it starts those marked. Sent in the transaction of its pending acks. The arrays
-- go in binary (%b).
select id, marked from pgqueue.mark_started(%b::uuid[], %b::bigint[])
