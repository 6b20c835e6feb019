-- pgqueue.reserve(queues, max_jobs, lease_seconds, run_now) -> the reservations granted
-- (revision 0009, issue 29: each grant returns its due time too; the return type changed, so the
-- previous version is dropped first, both overloads; a fresh install has none to drop)
-- (revision 0010, issue 28: a queue served by partition gives pgqueue.reserve_partitions its
-- locked row and learns from it which candidates may not run again, a statement less per
-- priority; priority aging, queues.aging)
-- (revision 0011, issue 28: and whether any candidate's lease expired unended, so a reservation of
-- a partitioned queue no longer probes every granted job by id to find those attempts)
-- (revision 0013, issue 28: slot handover. p_waiting, per queue of p_queues, is how many jobs the
-- caller will hold beyond the free slots of a queue with a concurrency limit, each waiting for a
-- slot of its own to end (pgqueue.hand_over); granted with waiting = true, they do not count in the
-- limit until handed a slot. Another column (waiting) in the result, so the previous version is
-- dropped first.)
-- (revision 0014, issue 28: slot heirs. p_heirs / p_heir_tokens name slots the caller holds, each by
-- the job that took it (id and the token of that reservation): beyond a limited queue's free slots,
-- the i-th waiting grant becomes an heir in the slot named i-th (waiting = true, heir_of and
-- heir_of_token naming it), which it takes with no write of its own. The limit counts slots, not
-- rows: a job and its heirs hold one. Another column (heir_of) in the result, so the previous
-- version is dropped first.)
-- (revision 0015, issue 31: the grant learns each candidate's place in the batch once, from the
-- batch's ordinality joined by id, instead of searching the batch for it six times per row
-- (array_position is a linear search: with the worker's reservations of ~400 jobs that was most of
-- the reservation's cost); the lost attempts' insert is a statement of its own, run only when there
-- are some, and the checks of p_waiting and p_heirs only when given. Same signature and result;
-- created in place.)
-- Takes up to p_max_jobs jobs that are ready (or whose lease expired) from p_queues, in the
-- order given: the first queue is drained before the next is looked at, and within a queue
-- higher priority goes first, then earlier available_at. Rows are locked with
-- FOR UPDATE SKIP LOCKED, so concurrent callers never block each other or get the same job.
-- Each granted job gets attempts + 1, a fresh fencing token and a lease that ends
-- p_lease_seconds from now on the database clock (stored in available_at; the time it was due
-- goes to due_at, where the queue latency of pgqueue.job_stats starts); p_lease_seconds
-- must be from 0.001 (1 ms) to 31536000 (1 year).
-- Prefetch: the caller runs the first p_run_now jobs at once and buffers the rest. A buffered
-- job on its final try is granted with prefetched = true, and its worker starts it only once
-- pgqueue.mark_started has cleared the mark (committed). So a lease that expires while still
-- marked belongs to a job that never ran: the next reservation gives that attempt back
-- instead of counting another, and no job fails unrun because its worker died with it in the
-- buffer. (A buffered job with tries left is counted like a running one: a death costs it a
-- try, never its last.)
-- A candidate that may not run again is moved to failed_jobs instead of being handed out:
--   retry_until passed                        -> reason 'deadline_passed'
--   attempts used up and its lease expired    -> reason 'lease_expired_after_final_attempt'
--   attempts used up (released on its last)   -> reason 'attempts_exhausted'
-- (each counted as failed in the history, pgqueue.job_stats).
-- Queue controls (pgqueue.queues) are decided here, so no worker can overshoot by racing:
-- a paused queue is skipped; a queue with a concurrency or rate limit has its row locked
-- (SKIP LOCKED: a worker that finds another reserving from it moves on to its next queue)
-- while the jobs of the queue reserved with a live lease are counted and its token bucket
-- is refilled and spent (capacity rate_burst, default the rate per period). A queue without a row costs one primary-key probe.
-- Each grant also returns due_at, the time its attempt became due (available_at before this
-- reservation: the dispatch time or the end of a delay, a retry's backoff or a snooze, or the end
-- of an expired lease), and queued_seconds, from due_at to this reservation (database clock): the
-- queue latency pgqueue.job_stats counts up to the reservation, so a worker's metrics count the
-- same latency (queued_seconds + its own wait until the handler starts) for delayed and retried
-- jobs alike. Both come from the row the grant already updates: no extra read.
-- Issue 28: a queue served by partition (per-partition limits, overrides or fair shares:
-- queues.partitioned) is locked the same way, and its candidates of each priority are picked by
-- pgqueue.reserve_partitions (each partition within its limits, in weighted round robin).
-- Issue 28, priority aging: in a queue with queues.aging set (pgqueue.set_aging), a ready job's
-- priority counts one level higher per `aging` it has waited since it became due, never above the
-- queue's highest priority with ready jobs; jobs are served by that effective priority, then the one
-- due first: pgqueue.aged_priority picks the level to serve next and how far (ready_by), two index
-- probes per priority level present. A queue without aging walks its priorities as before.
-- Issue 28, slot handover: in a queue with a concurrency limit (not served by partition) the limit
-- counts the reserved jobs with a live lease that are not waiting. A caller that holds jobs of such a
-- queue (not an adaptive one) may ask for up to p_waiting[i] more than the free slots: they are granted after the slotted
-- ones (oldest due first, as always), with waiting = true, leased like any grant but not counted.
-- The caller starts one only in the slot of one of its jobs of that queue that ended with an ack,
-- and records it with that ack, in the same transaction (pgqueue.hand_over): the count does not
-- move, and the queue's jobs run back to back without a reservation per freed slot. A caller that
-- never hands over leaves p_waiting null (the default): nothing is granted beyond the limit.
-- Issue 28, slot heirs (revision 0014): the same, without hand_over and without a write per job. A
-- slot is known by the reservation that took it (the job's id and token); the heirs granted in it
-- carry that pair in heir_of / heir_of_token. A queue's limit counts its slots in use: the distinct
-- slots of its live reservations (a job granted a slot, or an heir), each a job's own or the one its
-- heir_of names, so the job that took a slot and its heirs, running or waiting, hold one slot
-- together, from the first reservation until the last of them ends. The caller names its slots of
-- limited queues in p_heirs (p_heir_tokens: their tokens), once per heir it asks for, in the order it
-- wants them served; beyond the free slots, the waiting grants go to those of the named slots that
-- are still held (the job that took it, or one of its heirs, reserved and leased), in that order, and
-- the rest of the grants to hand_over (p_waiting). The caller runs a slot's jobs one at a time, each
-- heir once the one before it ended (or was dropped unstarted), so the slot's count is what runs.
-- An heir that ends without running (cancelled, handed back, its lease lost) passes nothing on.
-- From psql:  select * from pgqueue.reserve(array['default'], 10, 60, 10);
--        or:  select * from pgqueue.reserve(array['default'], 10, 60);  (all run at once)
-- Revision 0015 keeps 0014's signatures, so both functions are replaced in place (a drop would
-- also drop the grants an operator gave on them); an install older than 0014 reaches here through
-- 0014's file, which dropped the older overloads.

create or replace function pgqueue.reserve(p_queues text[], p_max_jobs integer, p_lease_seconds double precision,
                                          p_run_now integer, p_waiting integer[] default null,
                                          p_heirs uuid[] default null, p_heir_tokens bigint[] default null)
returns table (id uuid, token bigint, attempts integer, max_tries integer, retry_until timestamptz,
               lease_expires_at timestamptz, lease_seconds_left double precision,
               queue text, priority smallint, envelope jsonb, prefetched boolean, due_at timestamptz,
               queued_seconds double precision, waiting boolean, heir_of uuid)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_now timestamptz := clock_timestamp();
    v_lease interval;
    v_remaining integer := p_max_jobs;
    v_queue text;
    v_priority smallint;
    v_ids uuid[];
    v_doomed boolean;
    v_lost boolean;  -- issue 26: a candidate's lease expired unended (its attempt is recorded)
    v_granted integer;
    v_take integer;
    v_control pgqueue.queues;
    v_running integer;
    v_tokens double precision;
    v_limited boolean;
    v_partitioned boolean;
    v_doomed_queues text[];
    v_doomed_names text[];
    v_doomed_ids uuid[];
    v_aging interval;            -- issue 28: the queue's priority aging (null: none)
    v_ready_by timestamptz;      -- due by then: v_now, or earlier for a level served under aging
    v_skipped smallint[];        -- aging: levels where this call found nothing it could take
    v_index integer := 0;        -- the queue's place in p_queues (its p_waiting)
    v_slots integer;             -- of v_take, how many still get a slot (the rest are granted waiting)
    v_heirs uuid[];              -- slot heirs: the named slots still held in this queue, one per heir, in order
    v_heir_tokens bigint[];      -- and the tokens that name them
    v_heirs_used integer;        -- how many of them this call has granted an heir in so far
begin
    if p_max_jobs is null or p_max_jobs < 1 then
        raise exception 'pgqueue.reserve: max_jobs must be >= 1, got %', p_max_jobs using errcode = '22023';
    end if;
    -- NaN sorts above every number in PostgreSQL, so the upper bound refuses it too.
    if p_lease_seconds is null or not (p_lease_seconds >= 0.001::double precision and p_lease_seconds <= 31536000) then
        raise exception 'pgqueue.reserve: lease_seconds must be a finite number from 0.001 to 31536000 (1 year), got %',
                        p_lease_seconds
            using errcode = '22023';
    end if;
    if p_run_now is null or p_run_now < 0 then
        raise exception 'pgqueue.reserve: run_now must be >= 0, got %', p_run_now using errcode = '22023';
    end if;
    if p_queues is null or cardinality(p_queues) = 0 then
        raise exception 'pgqueue.reserve: give at least one queue' using errcode = '22023';
    end if;
    -- (revision 0015: the checks with a query run only when there is something to check; an
    -- expression with a subquery costs a statement per call even when its first operand is false)
    if p_waiting is not null then
        if cardinality(p_waiting) <> cardinality(p_queues)
           or exists (select from unnest(p_waiting) w where w is null or w < 0) then
            raise exception 'pgqueue.reserve: waiting must give a count >= 0 for each of the % queues, got %',
                            cardinality(p_queues), p_waiting using errcode = '22023';
        end if;
    end if;
    if p_heirs is not null or p_heir_tokens is not null then
        if cardinality(p_heirs) is distinct from cardinality(p_heir_tokens)
           or exists (select from unnest(p_heirs, p_heir_tokens) h(id, token) where h.id is null or h.token is null) then
            raise exception 'pgqueue.reserve: heirs and heir_tokens must name the same number of jobs (an id and its token each, none null), got % ids and % tokens',
                            coalesce(cardinality(p_heirs), 0), coalesce(cardinality(p_heir_tokens), 0)
                using errcode = '22023';
        end if;
    end if;
    v_lease := make_interval(secs => p_lease_seconds);

    foreach v_queue in array p_queues loop
        exit when v_remaining <= 0;
        v_index := v_index + 1;
        v_take := v_remaining;
        v_limited := false;
        v_partitioned := false;
        v_slots := null;  -- no concurrency limit: every grant runs
        v_heirs := '{}';
        v_heir_tokens := '{}';
        v_heirs_used := 0;
        v_aging := null;
        v_ready_by := v_now;
        select q.* into v_control from pgqueue.queues q where q.name = v_queue;
        if found then
            continue when v_control.paused;
            v_aging := v_control.aging;
            if v_control.concurrency is not null or v_control.rate_limit is not null or v_control.partitioned then
                -- Serialise the reservations of a limited queue: the count below then sees
                -- every grant committed before, and none can be granted beside ours.
                select q.* into v_control from pgqueue.queues q where q.name = v_queue for update skip locked;
                continue when not found or v_control.paused;
                v_limited := true;
                v_partitioned := v_control.partitioned;
                if v_control.concurrency is not null then
                    -- Slots in use: a job and its heirs hold one (slot heirs); a job granted for
                    -- hand_over holds none until handed one.
                    select count(distinct (coalesce(j.heir_of, j.id), coalesce(j.heir_of_token, j.token)))
                    into v_running
                    from pgqueue.jobs j
                    where j.queue = v_queue and j.token is not null and j.available_at > v_now
                      and (not j.waiting or j.heir_of is not null);
                    v_slots := least(v_take, greatest(v_control.concurrency - v_running, 0));
                    if p_heirs is not null and not v_partitioned and v_control.adaptive_min is null
                       and v_take > v_slots then
                        -- Slot heirs: the named slots of this queue still held (the job that took it,
                        -- or an heir in it, reserved and leased), each slot looked up once, by primary
                        -- key or jobs_heir_idx; every naming of a held slot is one heir, in order.
                        with named as (
                            select t.id, t.token, t.n
                            from unnest(p_heirs, p_heir_tokens) with ordinality as t(id, token, n)
                        ),
                        held as materialized (
                            select d.id, d.token
                            from (select distinct named.id, named.token from named) d
                            where exists (select from pgqueue.jobs x
                                          where x.id = d.id and x.token = d.token and x.queue = v_queue
                                            and x.available_at > v_now and not x.waiting)
                               or exists (select from pgqueue.jobs w
                                          where w.heir_of = d.id and w.heir_of_token = d.token
                                            and w.queue = v_queue and w.token is not null
                                            and w.available_at > v_now)
                        )
                        select coalesce(array_agg(h.id order by h.n), '{}'), coalesce(array_agg(h.token order by h.n), '{}')
                        into v_heirs, v_heir_tokens
                        from (select named.id, named.token, named.n
                              from named join held on held.id = named.id and held.token = named.token
                              order by named.n
                              limit v_take - v_slots) h;
                    end if;
                    v_take := least(v_take, v_slots + cardinality(v_heirs)
                                            + case when v_partitioned or v_control.adaptive_min is not null
                                                   then 0 else coalesce(p_waiting[v_index], 0) end);
                end if;
                if v_control.rate_limit is not null then
                    -- The bucket holds up to rate_burst tokens (default: the rate per period),
                    -- so one reservation may take many jobs; any window of T seconds still sees
                    -- at most rate * T + burst reservations.
                    v_tokens := least(coalesce(v_control.rate_burst, v_control.rate_limit)::double precision,
                        v_control.rate_tokens
                        + extract(epoch from v_now - v_control.rate_refilled_at)::double precision
                          * v_control.rate_limit / extract(epoch from v_control.rate_period)::double precision);
                    v_take := least(v_take, floor(v_tokens)::integer);
                end if;
                continue when v_take <= 0;
                if v_control.concurrency is not null then
                    v_slots := least(v_slots, v_take);
                end if;
            end if;
        end if;
        -- Walk the priorities present in this queue from the highest down: each step is
        -- one index probe, and each reservation below is a clean range of the index.
        if v_aging is null then
            select max(j.priority) into v_priority from pgqueue.jobs j where j.queue = v_queue;
        else
            v_skipped := '{}';
            select a.priority, a.ready_by into v_priority, v_ready_by
            from pgqueue.aged_priority(v_queue, v_aging, v_now, v_skipped) a;
        end if;
        while v_priority is not null and v_take > 0 loop
            -- 1. Lock the candidates: a range of jobs_reservation_idx, oldest due first.
            -- An expired lease of a job still marked prefetched gives its attempt back.
            if v_partitioned then
                select r.ids, r.doomed, r.cursor_at, r.credit, r.lost
                into v_ids, v_doomed, v_control.partition_cursor, v_control.partition_credit, v_lost
                from pgqueue.reserve_partitions(v_control, v_priority, v_take, v_now, v_ready_by) r;
                if cardinality(v_ids) = 0 then
                    v_ids := null;
                end if;
            else
            select array_agg(c.id order by c.available_at),
                   coalesce(bool_or(c.attempts - c.refund >= c.max_tries or c.retry_until < v_now), false),
                   coalesce(bool_or(c.lost), false)
            into v_ids, v_doomed, v_lost
            from (
                select j.id, j.available_at, j.attempts, j.max_tries, j.retry_until,
                       (j.prefetched and j.token is not null)::integer as refund,
                       (j.token is not null and not j.prefetched) as lost
                from pgqueue.jobs j
                where j.queue = v_queue and j.priority = v_priority and j.available_at <= v_ready_by
                order by j.available_at
                limit v_take
                for update skip locked
            ) c;
            end if;

            if v_ids is not null then
                -- 2. Rarely: candidates that may not run again go to failed_jobs instead.
                -- Rows are found again by primary key (`id = any(...)`), never by a join:
                -- once PL/pgSQL caches a generic plan, it would guess a join input of unknown
                -- size at 10% of the table and hash-join a sequential scan of the backlog.
                if v_doomed then
                    with doomed as (
                        delete from pgqueue.jobs j
                        where j.id = any (v_ids)
                          and (j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                               or j.retry_until < v_now)
                        returning j.id, j.queue, j.envelope, j.attempts,
                                  case when j.retry_until < v_now then 'deadline_passed'
                                       when j.token is not null then 'lease_expired_after_final_attempt'
                                       else 'attempts_exhausted' end as reason
                    ),
                    moved as (
                        insert into pgqueue.failed_jobs as f (job_id, connection, queue, envelope, attempts, message, reason)
                        select d.id, coalesce(d.envelope->>'connection', 'database'), d.queue, d.envelope, d.attempts,
                           case d.reason
                               when 'deadline_passed' then 'the job''s retry_until deadline passed before it could run again'
                               when 'lease_expired_after_final_attempt' then format(
                                   'the lease of attempt %s of %s expired: its worker died, hung or lost the database; no tries left',
                                   d.attempts, d.attempts)
                               else format('all %s tries were used', d.attempts) end,
                           d.reason
                        from doomed d
                        returning f.job_id, f.queue, f.envelope->>'name' as name
                    )
                    select array_agg(m.queue), array_agg(m.name), array_agg(m.job_id)
                    into v_doomed_queues, v_doomed_names, v_doomed_ids from moved m;
                    perform pgqueue.record_outcomes('failed', v_doomed_queues, v_doomed_names, null, null);
                    -- The rest keep their order: a job's place in this call decides prefetched.
                    v_ids := array(select u.id from unnest(v_ids) with ordinality as u(id, n)
                                   where u.id <> all (coalesce(v_doomed_ids, '{}'::uuid[])) order by u.n);
                end if;

                -- issue 26: an attempt whose lease expired unended (its worker died, hung or lost the
                -- database; not a prefetched job, whose attempt is given back) is kept in the job's
                -- attempts (pgqueue.job_attempts), reason 'lease_expired', as a retry's error is.
                -- (revision 0015: a statement of its own, run only then; as a CTE of the grant it cost
                -- every reservation the opening of attempt_failures and its indexes.)
                if v_lost then
                    insert into pgqueue.attempt_failures (job_id, attempt, reason, message)
                    select j.id, j.attempts, 'lease_expired',
                           format('the lease of attempt %s expired before it ended: its worker died, hung or lost '
                                  'the database; the job ran again', j.attempts)
                    from pgqueue.jobs j
                    where j.id = any (v_ids) and j.token is not null and not j.prefetched;
                end if;

                -- 3. Grant the rest (the doomed rows are gone): attempts + 1, a fresh token,
                -- the lease in available_at; returned in candidate order (oldest due first).
                return query
                with granted as (
                    -- u.n: the candidate's place in this batch (1 = oldest due), joined once per row
                    -- (revision 0015: array_position here searched the whole batch, six times a row).
                    -- The rows are still found by primary key (`j.id = any (v_ids)`, see above): the
                    -- join only pairs each with its place.
                    update pgqueue.jobs j
                    set attempts = j.attempts + 1 - (j.prefetched and j.token is not null)::integer,
                        prefetched = (p_max_jobs - v_remaining + u.n > p_run_now
                                      or coalesce(u.n > v_slots, false))
                                     and j.attempts + 1 - (j.prefetched and j.token is not null)::integer
                                         >= j.max_tries,
                        token = nextval('pgqueue.lease_token_seq'),
                        reserved_at = v_now,
                        due_at = j.available_at,
                        available_at = v_now + v_lease,
                        -- past the free slots: an heir in the next slot named (slot heirs), or else
                        -- waiting for one handed over (hand_over)
                        waiting = coalesce(u.n > v_slots, false),
                        heir_of = case when u.n > v_slots then v_heirs[v_heirs_used + u.n - v_slots] end,
                        heir_of_token = case when u.n > v_slots then v_heir_tokens[v_heirs_used + u.n - v_slots] end
                    from unnest(v_ids) with ordinality as u(id, n)
                    where j.id = any (v_ids) and j.id = u.id
                    returning j.id, j.token, j.attempts, j.max_tries, j.retry_until, j.available_at,
                              j.queue, j.priority, j.envelope, j.prefetched, j.due_at, j.waiting, j.heir_of, u.n
                )
                select g.id, g.token, g.attempts, g.max_tries, g.retry_until, g.available_at,
                       extract(epoch from g.available_at - clock_timestamp())::double precision,
                       g.queue, g.priority, g.envelope, g.prefetched, g.due_at,
                       extract(epoch from v_now - g.due_at)::double precision, g.waiting, g.heir_of
                from granted g
                order by g.n;
                get diagnostics v_granted = row_count;
                v_remaining := v_remaining - v_granted;
                v_take := v_take - v_granted;
                if v_slots is not null then
                    v_heirs_used := least(v_heirs_used + greatest(v_granted - v_slots, 0), cardinality(v_heirs));
                    v_slots := greatest(v_slots - v_granted, 0);
                end if;
                if v_limited and v_control.rate_limit is not null then
                    v_tokens := v_tokens - v_granted;
                end if;
                -- A full batch needs no further probe (one index probe less per call).
                exit when v_take <= 0;
                -- Doomed candidates took slots without filling them: look at this priority again.
                continue when v_doomed;
            end if;
            if v_aging is null then
                select max(j.priority) into v_priority
                from pgqueue.jobs j where j.queue = v_queue and j.priority < v_priority;
            else
                -- Aging: choose again (this level's oldest moved on); a level that gave nothing is
                -- left for the rest of this call.
                if v_ids is null then
                    v_skipped := v_skipped || v_priority;
                end if;
                select a.priority, a.ready_by into v_priority, v_ready_by
                from pgqueue.aged_priority(v_queue, v_aging, v_now, v_skipped) a;
            end if;
        end loop;
        if v_limited and v_control.rate_limit is not null then
            update pgqueue.queues q set rate_tokens = v_tokens, rate_refilled_at = v_now where q.name = v_queue;
        end if;
    end loop;
end
$$;

comment on function pgqueue.reserve(text[], integer, double precision, integer, integer[], uuid[], bigint[]) is
    'pgqueue: reserve up to max_jobs ready jobs across queues in priority order, with a fresh token and a lease; '
    'those past run_now on their final try are marked prefetched until started (mark_started), and get the attempt '
    'back if their lease expires unstarted; beyond the free slots of a limited queue, one heir per slot named '
    '(heirs: held by the caller, known by the job that took it) and up to waiting[i] more for one handed over (hand_over).';

-- The three-argument call of earlier revisions: every job granted runs at once.
create or replace function pgqueue.reserve(p_queues text[], p_max_jobs integer, p_lease_seconds double precision)
returns table (id uuid, token bigint, attempts integer, max_tries integer, retry_until timestamptz,
               lease_expires_at timestamptz, lease_seconds_left double precision,
               queue text, priority smallint, envelope jsonb, due_at timestamptz, queued_seconds double precision)
language sql
set search_path = pg_catalog, pg_temp
as $$
    select r.id, r.token, r.attempts, r.max_tries, r.retry_until, r.lease_expires_at, r.lease_seconds_left,
           r.queue, r.priority, r.envelope, r.due_at, r.queued_seconds
    from pgqueue.reserve(p_queues, p_max_jobs, p_lease_seconds, greatest(p_max_jobs, 0)) r
$$;

comment on function pgqueue.reserve(text[], integer, double precision) is
    'pgqueue: reserve up to max_jobs ready jobs across queues in priority order, with a fresh token and a lease.';
