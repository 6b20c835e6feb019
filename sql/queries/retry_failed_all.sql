select pgqueue.retry_failed_all(%s::text)
