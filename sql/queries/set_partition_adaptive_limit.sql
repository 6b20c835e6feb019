-- Issue 28: the adaptive bounds of every partition of a queue (partition null) or of one (nulls: off).
select pgqueue.set_partition_adaptive_limit(%s::text, %s::text, %s::integer, %s::integer)
