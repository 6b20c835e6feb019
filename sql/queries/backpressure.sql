-- issue 28: the handler reported backpressure: give the job back after a delay without using up a
-- try, and halve its queue's adaptive limit (pgqueue.backpressure).
select pgqueue.backpressure(%s::uuid, %s::bigint, %s::double precision)
