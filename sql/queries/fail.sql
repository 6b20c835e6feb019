select pgqueue.fail(%s::uuid, %s::bigint, %s, %s, %s, %s)
