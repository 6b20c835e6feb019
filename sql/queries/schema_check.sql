-- Whether the pgqueue schema is installed (used to give a clear "run pgqueue migrate" error).
select to_regprocedure('pgqueue.reserve(text[], integer, double precision)') is not null
