-- Rows in the queue table (ready, delayed and reserved).
select count(*) from pgqueue.jobs
