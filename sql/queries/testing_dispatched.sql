-- The stored jobs, oldest dispatch first, for pgqueue.testing's dispatched() / assert_dispatched():
-- every job (name null) or those of one job name, with what a test asserts on.
select j.id, j.envelope->>'name' as name, j.queue, j.priority, j.envelope->'args' as args,
       j.envelope->>'connection' as connection, j.attempts, j.max_tries,
       case when j.token is not null then 'reserved'
            when j.available_at > now() then 'delayed'
            else 'ready' end as state,
       j.available_at, j.created_at
from pgqueue.jobs j
where %(name)s::text is null or j.envelope->>'name' = %(name)s::text
order by j.created_at, j.id
