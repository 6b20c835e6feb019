select pgqueue.register_worker(%(id)s::uuid, %(host)s::text, %(pid)s::integer, %(queues)s::text[],
                               %(concurrency)s::integer, %(prefetch)s::integer, %(version)s::text,
                               %(stale_after)s::double precision)
