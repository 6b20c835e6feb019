-- pgqueue.release_unstarted(ids, tokens) -> per job, whether the fence matched
-- For a worker that stops with jobs reserved but never started: puts them back ready now
-- and gives back the attempt the reservation took, so a restart does not eat a try.
create or replace function pgqueue.release_unstarted(p_ids uuid[], p_tokens bigint[])
returns table (id uuid, released boolean)
language plpgsql
as $$
begin
    if cardinality(p_ids) is distinct from cardinality(p_tokens) then
        raise exception 'pgqueue.release_unstarted: % ids but % tokens', cardinality(p_ids), cardinality(p_tokens)
            using errcode = '22023';
    end if;
    return query
    with back as (
        update pgqueue.jobs j
        set token = null, reserved_at = null, available_at = clock_timestamp(),
            attempts = greatest(j.attempts - 1, 0)
        from unnest(p_ids, p_tokens) as t(id, token)
        where j.id = t.id and j.token = t.token
        returning j.id, t.token, j.queue
    ), notified as (
        select b.id, b.token, pg_notify('pgqueue', b.queue) from back b
    )
    select t.id, n.id is not null
    from unnest(p_ids, p_tokens) with ordinality as t(id, token, n)
    left join notified n on n.id = t.id and n.token = t.token
    order by t.n;
end
$$;

comment on function pgqueue.release_unstarted(uuid[], bigint[]) is
    'pgqueue: return reserved-but-never-started jobs (fenced), ready now, giving back their attempt.';
