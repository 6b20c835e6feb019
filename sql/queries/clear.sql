select pgqueue.clear(%s::text)
