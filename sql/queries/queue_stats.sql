select queue, ready, delayed, reserved, expired, failed, extract(epoch from oldest_ready_age)::double precision
from pgqueue.queue_stats order by queue
