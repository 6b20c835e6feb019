-- pgqueue.record_failure(envelope, attempts, exception, message, traceback, reason) -> failure id
-- Records a failure of a job that never lived in pgqueue.jobs (the sync connection runs
-- jobs inline at dispatch), so operators find it with the same queries and tools.
create or replace function pgqueue.record_failure(p_envelope jsonb, p_attempts integer, p_exception text,
                                                  p_message text, p_traceback text, p_reason text default 'exception')
returns uuid
language sql
as $$
    insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, exception, message, traceback, reason)
    values ((p_envelope->>'id')::uuid, coalesce(p_envelope->>'connection', 'sync'), p_envelope->>'queue', p_envelope,
            p_attempts, p_exception, coalesce(p_message, ''), p_traceback, p_reason)
    returning id
$$;

comment on function pgqueue.record_failure(jsonb, integer, text, text, text, text) is
    'pgqueue: record a failure of a job that ran outside pgqueue.jobs (sync connection).';
