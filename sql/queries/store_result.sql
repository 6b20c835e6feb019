-- issue 26: the return value of a handler whose context.transaction() acked it, written fenced by
-- the attempt's token (pgqueue.store_result); false when no pending result of that token exists.
select pgqueue.store_result(%s::uuid, %s::bigint, %s::text::jsonb)
