-- pgqueue workflows not finished yet: a workflow is a job, whose row goes when it ends.
select count(*) from pgqueue.jobs
