-- Ready jobs (channel pgqueue) and delayed ones (channel pgqueue_delayed); payload = queue.
listen pgqueue; listen pgqueue_delayed
