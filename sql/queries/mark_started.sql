-- The worker started jobs of its prefetch buffer: from now on their attempt counts if it dies.
-- Sent in the transaction of the completer's acks. The arrays go in binary (%b).
select pgqueue.mark_started(%b::uuid[], %b::bigint[])
