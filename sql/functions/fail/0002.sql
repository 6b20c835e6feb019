-- pgqueue.fail(id, token, exception, message, traceback, reason) -> whether the fence matched
-- Terminal failure: the job is deleted and its failure recorded in one statement, so there
-- is never a failure record for a live job nor a vanished job without its record. If the
-- insert fails, nothing changes and the reservation recovers when its lease expires.
-- From psql:  select pgqueue.fail('<job id>', <token>, null, 'given up by operator', null, 'failed_by_handler');
create or replace function pgqueue.fail(p_id uuid, p_token bigint, p_exception text, p_message text,
                                        p_traceback text, p_reason text default 'exception')
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_count integer;
begin
    with moved as (
        delete from pgqueue.jobs j
        where j.id = p_id and j.token = p_token
        returning j.id, j.queue, j.envelope, j.attempts
    )
    insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, exception, message, traceback, reason)
    select m.id, coalesce(m.envelope->>'connection', 'database'), m.queue, m.envelope, m.attempts,
           p_exception, coalesce(p_message, ''), p_traceback, p_reason
    from moved m;
    get diagnostics v_count = row_count;
    return v_count = 1;
end
$$;

comment on function pgqueue.fail(uuid, bigint, text, text, text, text) is
    'pgqueue: move a reserved job to failed_jobs atomically (fenced by its token).';
