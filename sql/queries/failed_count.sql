select count(*) from pgqueue.failed_jobs where (%s::text is null or queue = %s::text)
