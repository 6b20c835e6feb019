-- Issue 28, slot handover: the waiting jobs a worker started in the slots of jobs it acks in the same
-- transaction (after the ack); the rows come back in the order given, handed = false where refused.
select id, handed from pgqueue.hand_over(%s::uuid[], %s::uuid[], %s::bigint[])
