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
    v_ids uuid[];
    v_doomed boolean;
    v_granted integer;
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
            -- 1. Lock the candidates: a range of jobs_reservation_idx, oldest due first.
            select array_agg(c.id order by c.available_at),
                   coalesce(bool_or(c.attempts >= c.max_tries or c.retry_until < v_now), false)
            into v_ids, v_doomed
            from (
                select j.id, j.available_at, j.attempts, j.max_tries, j.retry_until
                from pgqueue.jobs j
                where j.queue = v_queue and j.priority = v_priority and j.available_at <= v_now
                order by j.available_at
                limit v_remaining
                for update skip locked
            ) c;

            if v_ids is not null then
                -- 2. Rarely: candidates that may not run again go to failed_jobs instead.
                -- Rows are found again by primary key (`id = any(...)`), never by a join:
                -- once PL/pgSQL caches a generic plan, it would guess a join input of unknown
                -- size at 10% of the table and hash-join a sequential scan of the backlog.
                if v_doomed then
                    with doomed as (
                        delete from pgqueue.jobs j
                        where j.id = any (v_ids)
                          and (j.attempts >= j.max_tries or j.retry_until < v_now)
                        returning j.id, j.queue, j.envelope, j.attempts,
                                  case when j.retry_until < v_now then 'deadline_passed'
                                       when j.token is not null then 'lease_expired_after_final_attempt'
                                       else 'attempts_exhausted' end as reason
                    )
                    insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, message, reason)
                    select d.id, coalesce(d.envelope->>'connection', 'database'), d.queue, d.envelope, d.attempts,
                           case d.reason
                               when 'deadline_passed' then 'the job''s retry_until deadline passed before it could run again'
                               when 'lease_expired_after_final_attempt' then format(
                                   'the lease of attempt %s of %s expired: its worker died, hung or lost the database; no tries left',
                                   d.attempts, d.attempts)
                               else format('all %s tries were used', d.attempts) end,
                           d.reason
                    from doomed d;
                end if;

                -- 3. Grant the rest (the doomed rows are gone): attempts + 1, a fresh token,
                -- the lease in available_at; returned in candidate order (oldest due first).
                return query
                with granted as (
                    update pgqueue.jobs j
                    set attempts = j.attempts + 1,
                        token = nextval('pgqueue.lease_token_seq'),
                        reserved_at = v_now,
                        available_at = v_now + v_lease
                    where j.id = any (v_ids)
                    returning j.id, j.token, j.attempts, j.max_tries, j.retry_until, j.available_at,
                              j.queue, j.priority, j.envelope
                )
                select g.id, g.token, g.attempts, g.max_tries, g.retry_until, g.available_at,
                       extract(epoch from g.available_at - clock_timestamp())::double precision,
                       g.queue, g.priority, g.envelope
                from granted g
                order by array_position(v_ids, g.id);
                get diagnostics v_granted = row_count;
                v_remaining := v_remaining - v_granted;
                -- A full batch needs no further probe (one index probe less per call).
                exit when v_remaining <= 0;
                -- Doomed candidates took slots without filling them: look at this priority again.
                continue when v_doomed;
            end if;
            select max(j.priority) into v_priority
            from pgqueue.jobs j where j.queue = v_queue and j.priority < v_priority;
        end loop;
    end loop;
end
$$;

comment on function pgqueue.reserve(text[], integer, double precision) is
    'pgqueue: reserve up to max_jobs ready jobs across queues in priority order, with a fresh token and a lease.';
