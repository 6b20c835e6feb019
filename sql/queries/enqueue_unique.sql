-- One job with a unique key (scope queued, active or period): its id and whether it was a duplicate.
select * from pgqueue.enqueue_unique(%s::jsonb, %s::double precision, %s::text, %s::text, %s::double precision)
