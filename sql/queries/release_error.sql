-- issue 26: a retry after a failed attempt: as release.sql, and the attempt's error (an object of
-- exception, message, traceback and worker) is kept in pgqueue.attempt_failures.
select pgqueue.release(%s::uuid, %s::bigint, %s::double precision, %s::double precision, %s::double precision,
                       %s::text::jsonb)
