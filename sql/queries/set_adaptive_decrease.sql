-- Issue 28: what a backpressure report multiplies a queue's adaptive limits by (null: the default, 0.9).
select pgqueue.set_adaptive_decrease(%s::text, %s::double precision)
