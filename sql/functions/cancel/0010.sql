-- pgqueue.cancel(id) -> what happened: 'cancelled', 'cancelled_running', 'already_cancelled',
-- 'already_failed' or 'not_found'
-- A ready, delayed or reserved job is deleted and recorded in failed_jobs with reason
-- 'cancelled' in one statement (retryable with pgqueue.retry_failed like any failure). A job
-- that was reserved ('cancelled_running') loses its token with its row, so any later ack,
-- release, fail or lease renewal of that attempt is refused; its worker hears of it on
-- channel pgqueue_cancel (payload: the job id) and cancels the handler. Cancelling an unknown,
-- finished (acked jobs leave no row) or already cancelled or failed job changes nothing.
-- A cancellation counts as cancelled in the history (pgqueue.job_stats).
-- Issue 27: cancelling a workflow also cancels the children it still waits for (context.run),
-- each through this function (so their own children follow); a workflow's running step is
-- stopped with its attempt, as any running handler.
-- From psql:  select pgqueue.cancel('<job id>');
create or replace function pgqueue.cancel(p_id uuid)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_queue text;
    v_envelope jsonb;
    v_attempts integer;
    v_reserved boolean;
    v_reason text;
begin
    delete from pgqueue.jobs j
    where j.id = p_id
    returning j.queue, j.envelope, j.attempts, j.token is not null
    into v_queue, v_envelope, v_attempts, v_reserved;
    if found then
        insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, message, reason)
        values (p_id, coalesce(v_envelope->>'connection', 'database'), v_queue, v_envelope, v_attempts,
                case when v_reserved then format('cancelled while attempt %s was running', v_attempts)
                     else 'cancelled before it ran' end,
                'cancelled');
        perform pgqueue.record_outcomes('cancelled', array[v_queue], array[v_envelope->>'name'], null, null);
        if v_envelope ? 'workflow' then
            perform pgqueue.cancel(s.child_id)
            from pgqueue.workflow_steps s
            where s.job_id = p_id and s.kind = 'child' and s.state = 'waiting'
              and exists (select 1 from pgqueue.jobs c where c.id = s.child_id);
        end if;
        if v_reserved then
            perform pg_notify('pgqueue_cancel', p_id::text);
            return 'cancelled_running';
        end if;
        return 'cancelled';
    end if;
    select f.reason into v_reason
    from pgqueue.failed_jobs f where f.job_id = p_id order by f.failed_at desc limit 1;
    return case when v_reason is null then 'not_found'
                when v_reason = 'cancelled' then 'already_cancelled'
                else 'already_failed' end;
end
$$;

comment on function pgqueue.cancel(uuid) is
    'pgqueue: cancel a job (ready, delayed or running) into failed_jobs with reason cancelled.';
