select pgqueue.set_limits(%s::text, %s::integer, %s::integer, %s::double precision, %s::integer)
