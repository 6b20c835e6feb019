select pgqueue.deregister_worker(%(id)s::uuid)
