select pgqueue.refresh_worker(%(id)s::uuid, %(held)s::uuid[])
