select pgqueue.pause(%s::text)
