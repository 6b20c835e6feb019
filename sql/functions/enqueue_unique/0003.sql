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
    v_id uuid := (p_envelope->>'id')::uuid;
    v_existing uuid;
    v_inserted uuid;
    v_constraint text;
begin
    if p_key is null or length(p_key) not between 1 and 1000 then
        raise exception 'pgqueue.enqueue_unique: the unique key must be 1 to 1000 characters, got %',
                        coalesce(length(p_key)::text || ' characters', 'null')
            using errcode = '22023';
    end if;
    if p_scope is null or p_scope not in ('queued', 'active', 'period') then
        raise exception 'pgqueue.enqueue_unique: scope must be queued, active or period, got %', coalesce(p_scope, 'null')
            using errcode = '22023';
    end if;
    if jsonb_typeof(p_envelope) is distinct from 'object' then
        raise exception 'pgqueue.enqueue_unique: %', coalesce(pgqueue.envelope_problem(p_envelope), 'envelope must be a JSON object')
            using errcode = '22023';
    end if;
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
    -- transaction goes on. The loop covers a holder that finished between our failed insert
    -- and our look-up: then the key is free and we insert again.
    loop
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
    end loop;
end
$$;

comment on function pgqueue.enqueue_unique(jsonb, double precision, text, text, double precision) is
    'pgqueue: insert one job unless its unique key is held (scope queued, active or period); returns the job id and whether it was a duplicate.';
