-- issue 26: what a job waits for and what waits for it (parent, child, batch).
select kind, other_id, open from pgqueue.job_family(%s::uuid)
