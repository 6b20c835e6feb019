-- pgqueue.heartbeat(ids, tokens, seconds) -> per job, whether its lease was renewed
-- The worker's lease heartbeat: renews the leases of all its running handlers in one
-- statement, each to end p_seconds from now (database clock). A lease is renewed only while
-- the caller's token is still the job's token: a holder whose lease expired and was
-- re-reserved by someone else, or whose job was cleared, gets renewed = false and nothing
-- changes; the worker then stops that handler.
-- search_path is pinned: only pg_catalog's built-ins run here, whatever the caller's path.
-- From psql:  select * from pgqueue.heartbeat(array['<job id>']::uuid[], array[<token>]::bigint[], 90);
create or replace function pgqueue.heartbeat(p_ids uuid[], p_tokens bigint[], p_seconds double precision)
returns table (id uuid, renewed boolean, lease_seconds_left double precision)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if cardinality(p_ids) is distinct from cardinality(p_tokens) then
        raise exception 'pgqueue.heartbeat: % ids but % tokens', cardinality(p_ids), cardinality(p_tokens)
            using errcode = '22023';
    end if;
    -- The bounds of pgqueue.limits.MIN_LEASE_SECONDS / MAX_LEASE_SECONDS. NaN sorts above
    -- every number in PostgreSQL, so the upper bound refuses it too.
    if p_seconds is null or not (p_seconds >= 0.001 and p_seconds <= 31536000) then
        raise exception 'pgqueue.heartbeat: seconds must be from 0.001 to 31536000 (one year), got %', p_seconds
            using errcode = '22023';
    end if;
    return query
    with renewed as (
        update pgqueue.jobs j
        set available_at = clock_timestamp() + make_interval(secs => p_seconds)
        from unnest(p_ids, p_tokens) as t(id, token)
        where j.id = t.id and j.token = t.token
        returning j.id, j.token, j.available_at
    )
    -- Answer per (id, token) pair as given, so a stale pair never borrows the verdict of
    -- a matching pair for the same job.
    select t.id, r.id is not null,
           extract(epoch from r.available_at - clock_timestamp())::double precision
    from unnest(p_ids, p_tokens) with ordinality as t(id, token, n)
    left join renewed r on r.id = t.id and r.token = t.token
    order by t.n;
end
$$;

comment on function pgqueue.heartbeat(uuid[], bigint[], double precision) is
    'pgqueue: renew the leases of running jobs whose (id, token) still match; renewed = false for stale holders.';
