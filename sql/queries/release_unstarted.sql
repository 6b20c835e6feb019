select id, released from pgqueue.release_unstarted(%b::uuid[], %b::bigint[])
