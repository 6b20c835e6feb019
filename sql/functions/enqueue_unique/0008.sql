-- pgqueue.enqueue_unique(envelope, delay_seconds, key, scope, period_seconds)
--   -> (id, duplicate)
-- Inserts one job unless a job holding the same unique key exists, in which case nothing is
-- inserted and that job's id comes back with duplicate = true. Scopes:
--   'queued'  (default) while a job of the key waits (ready or delayed);
--   'active'  while a job of the key waits or runs;
--   'period'  for p_period_seconds after the dispatch that took the key, even once that job
--             finished (pgqueue.unique_keys).
-- Enforced by unique indexes, never by a check-then-insert: concurrent calls with one key
-- insert one job. A call whose key is held by an uncommitted transaction waits for it on the
-- index entry; then it returns that job as the duplicate (committed) or inserts (rolled back).
-- A key is 1 to 1000 bytes (octet_length; UTF-8 in a UTF-8 database), so it always fits the
-- unique index; the period is above 0 and at most 315360000 seconds (10 years).
--
-- Under REPEATABLE READ or SERIALIZABLE the caller's snapshot decides what it can see: when the
-- key is held by a job committed after the snapshot was taken, the index refuses the insert but
-- no look-up can show the holder, so the call raises serialization_failure (SQLSTATE 40001,
-- naming the key) at once: roll the transaction back and run it again, as for any
-- serialization failure (the period scope gets PostgreSQL's own 40001 from ON CONFLICT in that
-- case). Under READ COMMITTED each look-up sees the latest commits, and a holder that finished
-- between the refused insert and the look-up frees the key, so the insert is tried again, at
-- most 5 times in all (then 40001 too: the key is changing hands faster than it can be taken).
--
-- The key and scope are also written into the envelope ("unique_key", "unique_scope") so SQL
-- and the failure record can show them. Everything else is pgqueue.enqueue.
-- From psql:  select * from pgqueue.enqueue_unique('{"id": "...", ...}'::jsonb, 0, 'invoice:42', 'queued', null);
create or replace function pgqueue.enqueue_unique(p_envelope jsonb, p_delay_seconds double precision,
                                                  p_key text, p_scope text, p_period_seconds double precision)
returns table (id uuid, duplicate boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_envelope jsonb;
    v_id uuid;
    v_existing uuid;
    v_inserted uuid;
    v_constraint text;
begin
    -- The messages are those of pgqueue/limits.py (unique_key_problem).
    if p_key is null then
        raise exception 'pgqueue.enqueue_unique: a unique key must be a string, got null' using errcode = '22023';
    end if;
    if octet_length(p_key) not between 1 and 1000 then
        raise exception 'pgqueue.enqueue_unique: a unique key must be 1 to 1000 bytes of UTF-8, got %: %',
                        octet_length(p_key), pgqueue.shown(p_key)
            using errcode = '22023';
    end if;
    if p_scope is null or p_scope not in ('queued', 'active', 'period') then
        raise exception 'pgqueue.enqueue_unique: scope must be queued, active or period, got %', coalesce(p_scope, 'null')
            using errcode = '22023';
    end if;
    if jsonb_typeof(p_envelope) is distinct from 'object' or jsonb_typeof(p_envelope->'id') is distinct from 'string'
            or (p_envelope->>'id') !~ '^[-{}0-9a-fA-F]+$' or length(p_envelope->>'id') not between 32 and 38 then
        raise exception 'pgqueue.enqueue_unique: %', coalesce(pgqueue.envelope_problem(p_envelope), 'envelope must be a JSON object')
            using errcode = '22023';
    end if;
    v_id := (p_envelope->>'id')::uuid;
    v_envelope := p_envelope || jsonb_build_object('unique_key', p_key, 'unique_scope', p_scope);

    if p_scope = 'period' then
        if p_period_seconds is null or not (p_period_seconds > 0 and p_period_seconds <= 315360000) then
            raise exception 'pgqueue.enqueue_unique: the period must be a finite number of seconds above 0 and at most 315360000 (10 years), got %',
                            p_period_seconds
                using errcode = '22023';
        end if;
        -- Take the key, or take over an expired one; the row lock of ON CONFLICT DO UPDATE
        -- serialises concurrent callers of one key.
        insert into pgqueue.unique_keys as k (key, job_id, expires_at)
        values (p_key, v_id, clock_timestamp() + make_interval(secs => p_period_seconds))
        on conflict (key) do update
            set job_id = excluded.job_id, expires_at = excluded.expires_at
            where k.expires_at <= clock_timestamp()
        returning k.job_id into v_inserted;
        if v_inserted is null then
            select k.job_id into v_existing from pgqueue.unique_keys k where k.key = p_key;
            return query select v_existing, true;
            return;
        end if;
        perform pgqueue.enqueue(v_envelope, p_delay_seconds);
        return query select v_id, false;
        return;
    end if;

    -- State scopes: the row carries the key. enqueue() validates and notifies; a duplicate
    -- makes its insert fail on the unique index, caught here (a subtransaction) so the caller's
    -- transaction goes on.
    for v_attempt in 1..5 loop
        begin
            perform pgqueue.enqueue(v_envelope, p_delay_seconds);
            update pgqueue.jobs j set unique_key = p_key, unique_scope = p_scope where j.id = v_id;
            return query select v_id, false;
            return;
        exception when unique_violation then
            -- Only the key's indexes make this a duplicate; any other violation is the caller's.
            get stacked diagnostics v_constraint = constraint_name;
            if v_constraint not in ('jobs_unique_queued_idx', 'jobs_unique_active_idx') then
                raise;
            end if;
        end;
        select j.id into v_existing from pgqueue.jobs j
        where j.unique_key = p_key and j.unique_scope = p_scope
          and (p_scope = 'active' or j.token is null)
        limit 1;
        if v_existing is not null then
            return query select v_existing, true;
            return;
        end if;
        -- A snapshot never shows later commits: looking again could only spin.
        if current_setting('transaction_isolation') in ('repeatable read', 'serializable') then
            raise exception 'pgqueue.enqueue_unique: unique key % is held by a job committed after this % transaction took its snapshot, so it can neither insert a job nor see the holder',
                            pgqueue.shown(p_key), upper(current_setting('transaction_isolation'))
                using errcode = '40001',
                      hint = 'Roll the transaction back and run it again (as for any serialization failure): the new snapshot shows the holder, returned as the duplicate.';
        end if;
    end loop;
    raise exception 'pgqueue.enqueue_unique: unique key % changed hands 5 times while this call tried to take it or find its holder',
                    pgqueue.shown(p_key)
        using errcode = '40001',
              hint = 'Run the call again.';
end
$$;

comment on function pgqueue.enqueue_unique(jsonb, double precision, text, text, double precision) is
    'pgqueue: insert one job unless its unique key is held (scope queued, active or period); returns the job id and whether it was a duplicate.';
