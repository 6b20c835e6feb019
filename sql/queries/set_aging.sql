-- Issue 28: a queue's priority aging, in seconds (null: none).
select pgqueue.set_aging(%s::text, %s::double precision)
