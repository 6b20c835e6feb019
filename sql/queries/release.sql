select pgqueue.release(%s::uuid, %s::bigint, %s::double precision)
