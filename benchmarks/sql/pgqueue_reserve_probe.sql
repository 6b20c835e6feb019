-- One batched reservation, as the worker makes it; the caller rolls the transaction back.
select count(*) from pgqueue.reserve(%s::text[], %s::integer, %s::double precision)
