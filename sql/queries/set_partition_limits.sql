-- Issue 28: the limits every partition of a queue gets, and fair shares.
select pgqueue.set_partition_limits(%s::text, %s::integer, %s::integer, %s::double precision, %s::integer, %s::boolean)
