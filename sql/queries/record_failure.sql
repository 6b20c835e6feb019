select pgqueue.record_failure(%s::jsonb, %s::integer, %s, %s, %s, %s)
