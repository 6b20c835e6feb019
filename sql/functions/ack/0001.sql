-- pgqueue.ack(ids, tokens) -> per job, whether the acknowledgement was accepted
-- Deletes finished jobs, many in one statement. A job is deleted only while the caller's
-- token is still the job's token: a holder whose lease expired and was re-reserved by
-- someone else gets acked = false and nothing changes.
-- From psql:  select * from pgqueue.ack(array['<job id>']::uuid[], array[<token>]::bigint[]);
create or replace function pgqueue.ack(p_ids uuid[], p_tokens bigint[])
returns table (id uuid, acked boolean)
language plpgsql
as $$
begin
    if cardinality(p_ids) is distinct from cardinality(p_tokens) then
        raise exception 'pgqueue.ack: % ids but % tokens', cardinality(p_ids), cardinality(p_tokens)
            using errcode = '22023';
    end if;
    return query
    with done as (
        delete from pgqueue.jobs j
        using unnest(p_ids, p_tokens) as t(id, token)
        where j.id = t.id and j.token = t.token
        returning j.id, j.token
    )
    -- Answer per (id, token) pair as given, so a stale pair never borrows the verdict of
    -- a matching pair for the same job.
    select t.id, d.id is not null
    from unnest(p_ids, p_tokens) with ordinality as t(id, token, n)
    left join done d on d.id = t.id and d.token = t.token
    order by t.n;
end
$$;

comment on function pgqueue.ack(uuid[], bigint[]) is
    'pgqueue: delete finished jobs whose (id, token) still match; returns acked = false for stale holders.';
