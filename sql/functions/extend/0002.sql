-- pgqueue.extend(id, token, seconds) -> (extended, lease_expires_at, lease_seconds_left)
-- Lease heartbeat for long jobs: the lease now ends p_seconds from now (database clock).
-- A stale or unknown token changes nothing and returns extended = false. p_seconds must be
-- from 0.001 (1 ms) to 31536000 (1 year).
create or replace function pgqueue.extend(p_id uuid, p_token bigint, p_seconds double precision)
returns table (extended boolean, lease_expires_at timestamptz, lease_seconds_left double precision)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_until timestamptz;
begin
    -- NaN sorts above every number in PostgreSQL, so the upper bound refuses it too. Below 1 ms
    -- the lease would end at once: the caller would lose its own job.
    if p_seconds is null or not (p_seconds >= 0.001::double precision and p_seconds <= 31536000) then
        raise exception 'pgqueue.extend: seconds must be a finite number from 0.001 to 31536000 (1 year), got %', p_seconds
            using errcode = '22023';
    end if;
    update pgqueue.jobs j
    set available_at = clock_timestamp() + make_interval(secs => p_seconds)
    where j.id = p_id and j.token = p_token
    returning j.available_at into v_until;
    if not found then
        return query select false, null::timestamptz, null::double precision;
    else
        return query select true, v_until, extract(epoch from v_until - clock_timestamp())::double precision;
    end if;
end
$$;

comment on function pgqueue.extend(uuid, bigint, double precision) is
    'pgqueue: extend the lease of a reserved job (fenced by its token).';
