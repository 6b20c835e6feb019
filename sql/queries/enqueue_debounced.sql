-- One job debounced by key (issue 28): its id, whether it joined an open window, and when it is due.
select * from pgqueue.enqueue_debounced(%s::jsonb, %s::text, %s::double precision, %s::double precision)
