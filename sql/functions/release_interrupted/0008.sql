-- pgqueue.release_interrupted(id, token, duration, wait) -> whether the fence matched
-- For a worker that stops a running handler itself (a forced stop: its drain timeout passed, or
-- a second SIGTERM): the job goes back ready now and the attempt the worker interrupted is given
-- back, like an unstarted one (pgqueue.release_unstarted), so a stop never spends a try; only
-- the handler's own failure, or a lease lost to a crash, does. Counted as given_back in the
-- history (pgqueue.job_stats), not as retried, with the handler's run time and the seconds from
-- receiving the reservation to starting the handler (see pgqueue.ack), null when unknown.
-- Notifies the queue (channel pgqueue): another worker may take it at once.
-- From psql:  select pgqueue.release_interrupted('<job id>', <token>, null, null);
create or replace function pgqueue.release_interrupted(p_id uuid, p_token bigint, p_duration double precision,
                                                       p_wait double precision)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_queue text;
    v_name text;
    v_latency double precision;
begin
    update pgqueue.jobs j
    set token = null, reserved_at = null, available_at = clock_timestamp(),
        attempts = greatest(j.attempts - 1, 0), prefetched = false
    from pgqueue.jobs old
    where j.id = p_id and j.token = p_token and old.id = j.id
    returning j.queue, j.envelope->>'name', extract(epoch from old.reserved_at - old.due_at)::double precision + p_wait
    into v_queue, v_name, v_latency;
    if not found then
        return false;
    end if;
    perform pgqueue.record_outcomes('given_back', array[v_queue], array[v_name], array[p_duration],
                                    array[v_latency]);
    perform pg_notify('pgqueue', v_queue);
    return true;
end
$$;

comment on function pgqueue.release_interrupted(uuid, bigint, double precision, double precision) is
    'pgqueue: put back a job whose attempt the worker interrupted (fenced), ready now, giving back the attempt; given_back in job_stats.';
