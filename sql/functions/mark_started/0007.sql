-- pgqueue.mark_started(ids, tokens) -> per job, whether the mark was cleared
-- A worker is about to start jobs of its prefetch buffer that reserve granted as prefetched
-- (their final try): it clears the mark first, and starts only those this answers true for.
-- From then on their attempt counts like any other if the worker dies. Fenced by the token:
-- a stale pair (the lease expired and the job was reserved again, it was cancelled or is
-- gone) changes nothing and answers false. Sent in one transaction with the worker's acks.
-- From psql:  select * from pgqueue.mark_started(array['<job id>']::uuid[], array[<token>]::bigint[]);
create or replace function pgqueue.mark_started(p_ids uuid[], p_tokens bigint[])
returns table (id uuid, marked boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if cardinality(p_ids) is distinct from cardinality(p_tokens) then
        raise exception 'pgqueue.mark_started: % ids but % tokens', cardinality(p_ids), cardinality(p_tokens)
            using errcode = '22023';
    end if;
    return query
    with started as (
        update pgqueue.jobs j
        set prefetched = false
        from unnest(p_ids, p_tokens) as t(id, token)
        where j.id = t.id and j.token = t.token
        returning j.id, j.token
    )
    select t.id, s.id is not null
    from unnest(p_ids, p_tokens) with ordinality as t(id, token, n)
    left join started s on s.id = t.id and s.token = t.token
    order by t.n;
end
$$;

comment on function pgqueue.mark_started(uuid[], bigint[]) is
    'pgqueue: before a prefetched job starts, clear its mark if (id, token) still match; marked = false for stale holders.';
