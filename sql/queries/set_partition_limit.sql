-- Issue 28: one named partition's override (concurrency, rate, weight; all null: none).
select pgqueue.set_partition_limit(%s::text, %s::text, %s::integer, %s::integer, %s::double precision, %s::integer,
                                   %s::integer)
