-- Before a worker stops a handler or drops a buffered job on a pgqueue_cancel notification, it
-- asks whether the database recorded the cancel (a notification is a hint, never an authority).
-- One call per burst of notifications; the arrays go in binary (%b).
select id, cancelled from pgqueue.cancelled(%b::uuid[], %b::bigint[])
