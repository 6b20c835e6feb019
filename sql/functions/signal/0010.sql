-- issue 27: pgqueue.signal(workflow id, name, payload) -> 'delivered' | 'woken'
-- Sends a signal to a live workflow: it is stored (pgqueue.workflow_signals) until a wait_for of
-- that name consumes it, so a signal sent before the wait is kept. If the workflow is parked
-- waiting for that name, it is made due now and its queue notified (the NOTIFY of a dispatch):
-- 'woken'; else 'delivered'. Refused with SQLSTATE 22023, storing nothing: a name that is empty
-- or over 200 characters, a payload over 65536 bytes of JSON, an id that is no live job
-- (unknown, finished, failed or cancelled), or a job that is not a workflow.
-- From psql:  select pgqueue.signal('<workflow id>', 'approved', '{"by": "ann"}');
create or replace function pgqueue.signal(p_id uuid, p_name text, p_payload jsonb default null)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_envelope jsonb;
    v_queue text;
    v_finished text;
begin
    if p_name is null or length(p_name) not between 1 and 200 then
        raise exception 'pgqueue.signal: the signal name must be 1 to 200 characters, got %',
                        coalesce(quote_literal(left(p_name, 40)), 'null')
            using errcode = '22023';
    end if;
    if p_payload is not null and octet_length(p_payload::text) > 65536 then
        raise exception 'pgqueue.signal: the payload of signal % is % bytes of JSON, over the limit of 65536; nothing was sent',
                        p_name, octet_length(p_payload::text)
            using errcode = '22023';
    end if;
    -- Locked: a wait of the workflow recording itself meanwhile is seen by the statements below.
    select j.envelope, j.queue into v_envelope, v_queue from pgqueue.jobs j where j.id = p_id for update;
    if not found then
        select case when exists (select 1 from pgqueue.failed_jobs f where f.job_id = p_id) then 'failed or was cancelled'
                    when exists (select 1 from pgqueue.job_results r where r.job_id = p_id)
                         or exists (select 1 from pgqueue.workflow_steps s where s.job_id = p_id) then 'has finished'
               end into v_finished;
        raise exception 'pgqueue.signal: workflow % %; signal % was not stored', p_id,
                        coalesce(v_finished, 'is unknown (no live job has this id)'), p_name
            using errcode = '22023';
    end if;
    if not v_envelope ? 'workflow' then
        raise exception 'pgqueue.signal: job % (%) is not a workflow; signal % was not stored', p_id,
                        v_envelope->>'name', p_name
            using errcode = '22023';
    end if;
    insert into pgqueue.workflow_signals (job_id, name, payload) values (p_id, p_name, p_payload);
    update pgqueue.jobs j set available_at = clock_timestamp()
    where j.id = p_id and j.token is null and j.available_at > clock_timestamp()
      and exists (select 1 from pgqueue.workflow_steps s
                  where s.job_id = p_id and s.kind = 'signal' and s.state = 'waiting' and s.signal = p_name);
    if found then
        perform pg_notify('pgqueue', v_queue);
        return 'woken';
    end if;
    return 'delivered';
end
$$;

comment on function pgqueue.signal(uuid, text, jsonb) is
    'pgqueue: send a signal to a workflow (kept until a wait_for consumes it; wakes it if it waits for that name) (issue 27).';
