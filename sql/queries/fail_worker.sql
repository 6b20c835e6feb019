-- issue 26: a terminal failure, as fail.sql, naming the worker whose attempt failed (host:pid).
select pgqueue.fail(%s::uuid, %s::bigint, %s, %s, %s, %s, %s::double precision, %s::double precision, %s::text)
