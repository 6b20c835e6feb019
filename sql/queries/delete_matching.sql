select pgqueue.delete_matching(%(ids)s::uuid[], %(queue)s::text, %(name)s::text, %(args)s::jsonb, %(state)s::text,
                  %(since)s::timestamptz, %(until)s::timestamptz, %(batch)s::integer)
