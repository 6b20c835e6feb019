-- issue 27: live workflows for workflow:list (pgqueue.workflows), optionally of one state, oldest first.
select id, name, version, queue, state, step_seq, step_name, step_kind, step_state, wake_at, awaited_signal,
       awaited_child, attempts, tries, created_at
from pgqueue.workflows
where %(state)s::text is null or state = %(state)s::text
order by created_at
limit %(limit)s::integer
