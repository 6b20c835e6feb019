-- pgqueue.reserve(queues, max_jobs, lease_seconds) -> the reservations granted
-- Takes up to p_max_jobs jobs that are ready (or whose lease expired) from p_queues, in the
-- order given: the first queue is drained before the next is looked at, and within a queue
-- higher priority goes first, then earlier available_at. Rows are locked with
-- FOR UPDATE SKIP LOCKED, so concurrent callers never block each other or get the same job.
-- Each granted job gets attempts + 1, a fresh fencing token and a lease that ends
-- p_lease_seconds from now on the database clock (stored in available_at).
-- A candidate that may not run again is moved to failed_jobs instead of being handed out:
--   retry_until passed                        -> reason 'deadline_passed'
--   attempts used up and its lease expired    -> reason 'lease_expired_after_final_attempt'
--   attempts used up (released on its last)   -> reason 'attempts_exhausted'
-- From psql:  select * from pgqueue.reserve(array['default'], 10, 60);
create or replace function pgqueue.reserve(p_queues text[], p_max_jobs integer, p_lease_seconds double precision)
returns table (id uuid, token bigint, attempts integer, max_tries integer, retry_until timestamptz,
               lease_expires_at timestamptz, lease_seconds_left double precision,
               queue text, priority smallint, envelope jsonb)
language plpgsql
as $$
declare
    v_now timestamptz := clock_timestamp();
    v_lease interval;
    v_remaining integer := p_max_jobs;
    v_queue text;
    v_priority smallint;
    v_doomed integer;
    v_rec record;
begin
    if p_max_jobs is null or p_max_jobs < 1 then
        raise exception 'pgqueue.reserve: max_jobs must be >= 1, got %', p_max_jobs using errcode = '22023';
    end if;
    -- NaN sorts above every number in PostgreSQL, so 'NaN' > 0 holds: refuse it by name.
    if p_lease_seconds is null or not (p_lease_seconds > 0) or p_lease_seconds in ('Infinity'::double precision, 'NaN'::double precision) then
        raise exception 'pgqueue.reserve: lease_seconds must be a finite number > 0, got %', p_lease_seconds
            using errcode = '22023';
    end if;
    if p_queues is null or cardinality(p_queues) = 0 then
        raise exception 'pgqueue.reserve: give at least one queue' using errcode = '22023';
    end if;
    v_lease := make_interval(secs => p_lease_seconds);

    foreach v_queue in array p_queues loop
        exit when v_remaining <= 0;
        -- Walk the priorities present in this queue from the highest down: each step is
        -- one index probe, and each reservation below is a clean range of the index.
        select max(j.priority) into v_priority from pgqueue.jobs j where j.queue = v_queue;
        while v_priority is not null and v_remaining > 0 loop
            v_doomed := 0;
            for v_rec in
                -- The candidates are a range of jobs_reservation_idx. The rows to move or
                -- grant are then found again by primary key through `id = any(array(...))`,
                -- never by joining the table to the candidate list: once PL/pgSQL caches a
                -- generic plan, it guesses a LIMIT of unknown size at 10% of the table and
                -- would hash-join a sequential scan of the whole backlog into every call.
                with candidate as (
                    select j.id, j.attempts, j.max_tries, j.retry_until, j.token, j.available_at
                    from pgqueue.jobs j
                    where j.queue = v_queue and j.priority = v_priority and j.available_at <= v_now
                    order by j.available_at
                    limit v_remaining
                    for update skip locked
                ), doomed as (
                    delete from pgqueue.jobs j
                    where j.id = any (array(
                        select c.id from candidate c
                        where c.attempts >= c.max_tries or c.retry_until < v_now))
                    returning j.id, j.queue, j.envelope, j.attempts,
                              case when j.retry_until < v_now then 'deadline_passed'
                                   when j.token is not null then 'lease_expired_after_final_attempt'
                                   else 'attempts_exhausted' end as reason
                ), recorded as (
                    insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, message, reason)
                    select d.id, coalesce(d.envelope->>'connection', 'database'), d.queue, d.envelope, d.attempts,
                           case d.reason
                               when 'deadline_passed' then 'the job''s retry_until deadline passed before it could run again'
                               when 'lease_expired_after_final_attempt' then format(
                                   'the lease of attempt %s of %s expired: its worker died, hung or lost the database; no tries left',
                                   d.attempts, d.attempts)
                               else format('all %s tries were used', d.attempts) end,
                           d.reason
                    from doomed d
                    returning 1
                ), granted as (
                    update pgqueue.jobs j
                    set attempts = j.attempts + 1,
                        token = nextval('pgqueue.lease_token_seq'),
                        reserved_at = v_now,
                        available_at = v_now + v_lease
                    where j.id = any (array(
                        select c.id from candidate c
                        where c.attempts < c.max_tries and (c.retry_until is null or c.retry_until >= v_now)))
                    returning j.id, j.token, j.attempts, j.max_tries, j.retry_until, j.available_at,
                              j.queue, j.priority, j.envelope
                )
                -- Granted jobs come back in candidate order (oldest due first).
                select true as is_granted, g.id, g.token, g.attempts, g.max_tries, g.retry_until,
                       g.available_at, g.queue, g.priority, g.envelope, c.available_at as due_at
                from granted g join candidate c on c.id = g.id
                union all
                select false, null, null, null, null, null, null, null, null, null, null
                from doomed
                order by is_granted desc, due_at
            loop
                if v_rec.is_granted then
                    id := v_rec.id;
                    token := v_rec.token;
                    attempts := v_rec.attempts;
                    max_tries := v_rec.max_tries;
                    retry_until := v_rec.retry_until;
                    lease_expires_at := v_rec.available_at;
                    lease_seconds_left := extract(epoch from v_rec.available_at - clock_timestamp());
                    queue := v_rec.queue;
                    priority := v_rec.priority;
                    envelope := v_rec.envelope;
                    v_remaining := v_remaining - 1;
                    return next;
                else
                    v_doomed := v_doomed + 1;
                end if;
            end loop;
            -- A full batch needs no further probe (one index probe less per call).
            exit when v_remaining <= 0;
            -- Doomed candidates took slots without filling them: look at this priority again.
            if v_doomed = 0 then
                select max(j.priority) into v_priority
                from pgqueue.jobs j where j.queue = v_queue and j.priority < v_priority;
            end if;
        end loop;
    end loop;
end
$$;

comment on function pgqueue.reserve(text[], integer, double precision) is
    'pgqueue: reserve up to max_jobs ready jobs across queues in priority order, with a fresh token and a lease.';
