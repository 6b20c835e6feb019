-- Bulk floor (benchmarks/floors.py): COPY of rows the client rendered before the clock started,
-- straight into pgqueue.jobs. No validation and no notification: the cheapest way rows reach the
-- table, with its indexes, its CHECKs and the jsonb parse of each envelope.
copy pgqueue.jobs (id, queue, priority, envelope, max_tries) from stdin
