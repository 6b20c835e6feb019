select pgqueue.enqueue_tick(%s::text, %s::timestamptz)
