-- The queues with outcomes in pgqueue.job_stats in the last %(minutes)s minutes (each once): idle
-- queues the dashboard still lists and charts. One range of job_stats' primary key (minute leads
-- it), the range the day chart reads anyway.
select distinct s.queue
from pgqueue.job_stats s
where s.minute >= date_trunc('minute', now()) - make_interval(mins => %(minutes)s::integer)
order by s.queue
