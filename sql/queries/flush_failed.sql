select pgqueue.flush_failed(%s::text, %s::interval)
