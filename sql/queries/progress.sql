-- issue 26: a running handler's progress report (context.progress), fenced by its token.
select pgqueue.progress(%s::uuid, %s::bigint, %s::double precision, %s::text::jsonb)
