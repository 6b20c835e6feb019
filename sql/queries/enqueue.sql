-- One job, inside the caller's transaction when dispatched with a connection.
select pgqueue.enqueue(%s::jsonb, %s::double precision)
