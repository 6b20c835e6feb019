select id, released from pgqueue.release_unstarted(%s::uuid[], %s::bigint[])
