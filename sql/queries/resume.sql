select pgqueue.resume(%s::text)
