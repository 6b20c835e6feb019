select pgqueue.cancel(%s::uuid)
