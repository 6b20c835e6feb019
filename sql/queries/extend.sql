select lease_seconds_left from pgqueue.extend(%s::uuid, %s::bigint, %s::double precision) where extended
