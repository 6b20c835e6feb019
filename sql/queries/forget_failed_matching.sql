select pgqueue.forget_failed_matching(%(queue)s::text, %(name)s::text, %(reason)s::text, %(since)s::timestamptz,
                  %(until)s::timestamptz, %(batch)s::integer)
