-- issue 27: a page of a workflow's checkpoints for its timeline on /workflows/<id>, in seq order after
-- %(after_seq)s: the result as JSON text while it is at most 65,536 bytes (result_bytes: its size; a
-- larger one is not read here, the page says so: it is masked whole before it is shown, never cut
-- through a secret), the error cut to its first 2,000 characters (error_cut when longer), the
-- duration in seconds (null while a step is not ended), and the child's id.
select s.seq, s.name, s.kind, s.state, s.attempts, s.started_at, s.ended_at,
       extract(epoch from s.ended_at - s.started_at)::double precision as seconds,
       s.wake_at, s.signal, s.child_id,
       case when octet_length(s.result::text) <= 65536 then s.result::text end as result,
       octet_length(s.result::text) as result_bytes,
       left(s.error, 2000) as error, length(s.error) > 2000 as error_cut
from pgqueue.workflow_steps s
where s.job_id = %(job_id)s::uuid and s.seq > %(after_seq)s::integer
order by s.seq
limit %(limit)s::integer
