-- issue 27: pgqueue.workflow_child(id, token, seq, name, envelope, delay) -> (outcome, child_id, result, error)
-- The seq-th step of a workflow runs a child job (context.run): in one fenced statement ('not_yours':
-- nothing dispatched, nothing changed) the child is dispatched (pgqueue.enqueue, at its first call
-- only: the step keeps its id, so a re-run never dispatches it twice) and, while it has not ended,
-- the workflow is parked until it does ('parked': the child is made the workflow's one parent with
-- the policy 'run', so pgqueue.jobs_ended releases the workflow whatever the child's end; no try is
-- used, no lease held). Once the child has ended the step records it and says so: 'succeeded' with
-- its kept result (null if it kept none), or 'failed' with its failure's reason and message (a
-- cancellation too). 'conflict': another step holds that seq or name (the code changed).
-- From psql:  select * from pgqueue.workflow_child('<job id>', <token>, 4, 'ship', '{...envelope...}', 0);
create or replace function pgqueue.workflow_child(p_id uuid, p_token bigint, p_seq integer, p_name text,
                                                  p_envelope jsonb, p_delay_seconds double precision)
returns table (outcome text, child_id uuid, result jsonb, error text)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_step pgqueue.workflow_steps;
    v_child uuid;
    v_result jsonb;
    v_pending boolean;
    v_failure text;
    v_queue text;
begin
    perform 1 from pgqueue.jobs j where j.id = p_id and j.token = p_token for update;
    if not found then
        return query select 'not_yours'::text, null::uuid, null::jsonb, null::text;
        return;
    end if;
    select * into v_step from pgqueue.workflow_steps s where s.job_id = p_id and s.seq = p_seq;
    if not found then
        if exists (select 1 from pgqueue.workflow_steps s where s.job_id = p_id and s.name = p_name) then
            return query select 'conflict'::text, null::uuid, null::jsonb, null::text;
            return;
        end if;
        v_child := pgqueue.enqueue(p_envelope, p_delay_seconds);
        insert into pgqueue.workflow_steps (job_id, seq, name, kind, state, child_id)
        values (p_id, p_seq, p_name, 'child', 'waiting', v_child)
        returning * into v_step;
    elsif v_step.name <> p_name or v_step.kind <> 'child' then
        return query select 'conflict'::text, null::uuid, null::jsonb, null::text;
        return;
    end if;
    v_child := v_step.child_id;
    if v_step.state = 'succeeded' then
        return query select 'succeeded'::text, v_child, v_step.result, null::text;
        return;
    elsif v_step.state = 'failed' then
        return query select 'failed'::text, v_child, null::jsonb, v_step.error;
        return;
    end if;
    -- Still running: wait for it (its row locked: it cannot end before the wait is recorded).
    perform 1 from pgqueue.jobs j where j.id = v_child for update;
    if found then
        update pgqueue.jobs j set has_dependents = true where j.id = v_child and not j.has_dependents;
        insert into pgqueue.job_dependencies (parent_id, child_id) values (v_child, p_id) on conflict do nothing;
        insert into pgqueue.dependent_jobs as w (job_id, parents, waiting_on, on_parent_failure, available_at)
        values (p_id, array[v_child], 1, 'run', clock_timestamp())
        on conflict (job_id) do update
            set parents = excluded.parents, waiting_on = 1, on_parent_failure = 'run',
                available_at = excluded.available_at, released_at = null;
        update pgqueue.jobs j
        set token = null, reserved_at = null, available_at = pgqueue.never(),
            attempts = greatest(j.attempts - 1, 0), snoozes = j.snoozes + 1
        where j.id = p_id and j.token = p_token;
        return query select 'parked'::text, v_child, null::jsonb, null::text;
        return;
    end if;
    select r.result, r.token is not null into v_result, v_pending from pgqueue.job_results r where r.job_id = v_child;
    if v_pending then
        -- Acked inside its transaction, its result not written yet: look again in a second.
        update pgqueue.jobs j
        set token = null, reserved_at = null, available_at = clock_timestamp() + interval '1 second',
            attempts = greatest(j.attempts - 1, 0), snoozes = j.snoozes + 1
        where j.id = p_id and j.token = p_token
        returning j.queue into v_queue;
        perform pg_notify('pgqueue_delayed', v_queue);
        return query select 'parked'::text, v_child, null::jsonb, null::text;
        return;
    end if;
    if v_pending is null then
        select f.reason || ': ' || f.message into v_failure from pgqueue.failed_jobs f
        where f.job_id = v_child order by f.failed_at desc limit 1;
    end if;
    update pgqueue.workflow_steps s
    set state = case when v_failure is null then 'succeeded' else 'failed' end, result = v_result,
        error = v_failure, ended_at = clock_timestamp(), attempts = 1
    where s.job_id = p_id and s.seq = p_seq;
    return query select case when v_failure is null then 'succeeded' else 'failed' end, v_child, v_result, v_failure;
end
$$;

comment on function pgqueue.workflow_child(uuid, bigint, integer, text, jsonb, double precision) is
    'pgqueue: dispatch a workflow''s child job exactly once and park the workflow until it ends (issue 27).';
