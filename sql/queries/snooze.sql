select pgqueue.snooze(%s::uuid, %s::bigint, %s::double precision)
