select pgqueue.forget_failed(%s::uuid)
