-- The completer's batched acknowledgement; returns only the refused ones. Per job: the handler's
-- run time and the wait from reservation to handler start (for pgqueue.job_stats); then whether
-- to keep a copy in pgqueue.completed_jobs. The arrays go in binary (%b): dumping them as text
-- escapes every element.
select id from pgqueue.ack(%b::uuid[], %b::bigint[], %b::double precision[], %b::double precision[], %s::boolean)
where not acked
