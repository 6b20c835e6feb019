-- pgqueue.fail(id, token, exception, message, traceback, reason[, duration, wait[, worker]]) -> whether the fence matched
-- Terminal failure: the job is deleted and its failure recorded in one statement, so there
-- is never a failure record for a live job nor a vanished job without its record. It counts
-- as failed in the history (pgqueue.job_stats); a worker passes its handler's run time and
-- the seconds from receiving the reservation to starting the handler (see pgqueue.ack), null
-- when unknown (no handler ran), and its name (host:pid), kept with the failure and in the job's
-- attempt history (pgqueue.attempt_failures, written by the trigger on failed_jobs). If the
-- insert fails, nothing changes and the reservation recovers when its lease expires.
-- From psql:  select pgqueue.fail('<job id>', <token>, null, 'given up by operator', null, 'failed_by_handler');
create or replace function pgqueue.fail(p_id uuid, p_token bigint, p_exception text, p_message text,
                                        p_traceback text, p_reason text,
                                        p_duration double precision, p_wait double precision, p_worker text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_queue text;
    v_name text;
    v_latency double precision;
begin
    with moved as (
        delete from pgqueue.jobs j
        where j.id = p_id and j.token = p_token
        returning j.id, j.queue, j.envelope, j.attempts,
                  extract(epoch from j.reserved_at - j.due_at)::double precision + p_wait as latency
    ),
    recorded as (
        insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, exception, message, traceback,
                                         reason, worker, duration)
        select m.id, coalesce(m.envelope->>'connection', 'database'), m.queue, m.envelope, m.attempts,
               p_exception, coalesce(p_message, ''), p_traceback, p_reason, p_worker, p_duration
        from moved m
        returning queue, envelope->>'name' as name
    )
    select r.queue, r.name, (select m.latency from moved m) into v_queue, v_name, v_latency from recorded r;
    if not found then
        return false;
    end if;
    perform pgqueue.record_outcomes('failed', array[v_queue], array[v_name], array[p_duration], array[v_latency]);
    return true;
end
$$;

comment on function pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision, text) is
    'pgqueue: move a reserved job to failed_jobs atomically (fenced by its token), counting it in job_stats.';

-- The call of revision 0005: no worker named.
create or replace function pgqueue.fail(p_id uuid, p_token bigint, p_exception text, p_message text,
                                        p_traceback text, p_reason text,
                                        p_duration double precision, p_wait double precision)
returns boolean
language sql
set search_path = pg_catalog, pg_temp
as $$
    select pgqueue.fail(p_id, p_token, p_exception, p_message, p_traceback, p_reason, p_duration, p_wait, null)
$$;

comment on function pgqueue.fail(uuid, bigint, text, text, text, text, double precision, double precision) is
    'pgqueue: move a reserved job to failed_jobs atomically (fenced by its token), counting it in job_stats.';

-- The call of revisions before 0005 (and of psql users): no run time known.
create or replace function pgqueue.fail(p_id uuid, p_token bigint, p_exception text, p_message text,
                                        p_traceback text, p_reason text default 'exception')
returns boolean
language sql
set search_path = pg_catalog, pg_temp
as $$
    select pgqueue.fail(p_id, p_token, p_exception, p_message, p_traceback, p_reason, null, null, null)
$$;

comment on function pgqueue.fail(uuid, bigint, text, text, text, text) is
    'pgqueue: move a reserved job to failed_jobs atomically (fenced by its token).';
