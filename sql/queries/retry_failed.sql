select pgqueue.retry_failed(%s::uuid)
