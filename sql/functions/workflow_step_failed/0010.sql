-- issue 27: pgqueue.workflow_step_failed(id, token, seq, name, error, tries, delay) -> 'retrying' | 'exhausted' | 'not_yours' | 'conflict'
-- The seq-th step of a workflow raised: its row counts the failed run (attempts + 1) and keeps the
-- error. While the step has tries left the workflow is put back to run again after p_delay_seconds
-- (the step's backoff) WITHOUT using up a try of the job, as pgqueue.snooze does ('retrying'); once
-- they are spent the row is marked failed and nothing else changes ('exhausted': the caller fails the
-- workflow, naming the step). A step marked failed that fails again (its workflow was put back by
-- pgqueue.retry_failed) starts a fresh count. Fenced by the job's token ('not_yours': nothing changed).
-- From psql:  select pgqueue.workflow_step_failed('<job id>', <token>, 1, 'charge', 'TimeoutError: ...', 3, 5);
create or replace function pgqueue.workflow_step_failed(p_id uuid, p_token bigint, p_seq integer, p_name text,
                                                        p_error text, p_tries integer, p_delay_seconds double precision)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_attempts integer;
    v_queue text;
begin
    if p_delay_seconds is null or not (p_delay_seconds >= 0 and p_delay_seconds <= 315360000) or p_tries is null
       or p_tries < 1 then
        raise exception 'pgqueue.workflow_step_failed: tries must be >= 1 and the delay from 0 to 315360000 seconds, got % and %',
                        p_tries, p_delay_seconds
            using errcode = '22023';
    end if;
    perform 1 from pgqueue.jobs j where j.id = p_id and j.token = p_token for update;
    if not found then
        return 'not_yours';
    end if;
    if exists (select 1 from pgqueue.workflow_steps s where s.job_id = p_id and s.name = p_name and s.seq <> p_seq) then
        return 'conflict';
    end if;
    insert into pgqueue.workflow_steps as s (job_id, seq, name, kind, state, error, attempts)
    values (p_id, p_seq, p_name, 'step', 'retrying', left(p_error, 4000), 1)
    on conflict (job_id, seq) do update
        set error = excluded.error, state = 'retrying', ended_at = null,
            attempts = case when s.state = 'failed' then 1 else s.attempts + 1 end
        where s.name = excluded.name and s.kind = 'step' and s.state in ('retrying', 'failed')
    returning s.attempts into v_attempts;
    if not found then
        return 'conflict';
    end if;
    if v_attempts >= p_tries then
        update pgqueue.workflow_steps s set state = 'failed', ended_at = clock_timestamp()
        where s.job_id = p_id and s.seq = p_seq;
        return 'exhausted';
    end if;
    update pgqueue.jobs j
    set token = null, reserved_at = null, available_at = clock_timestamp() + make_interval(secs => p_delay_seconds),
        attempts = greatest(j.attempts - 1, 0), snoozes = j.snoozes + 1
    where j.id = p_id and j.token = p_token
    returning j.queue into v_queue;
    perform pg_notify(case when p_delay_seconds = 0 then 'pgqueue' else 'pgqueue_delayed' end, v_queue);
    return 'retrying';
end
$$;

comment on function pgqueue.workflow_step_failed(uuid, bigint, integer, text, text, integer, double precision) is
    'pgqueue: count a workflow step''s failed run; retry it later without using a try of the job, or report its tries spent (issue 27).';
