-- pgqueue.mark_started(ids, tokens) -> how many marks were cleared
-- A worker reports that it started jobs it had reserved into its prefetch buffer (reserve's
-- prefetched = true): from now on their attempt counts like any other if the worker dies.
-- Fenced by the token: a stale pair (the lease expired and the job was reserved again, or it
-- is gone) changes nothing. Sent in the same transaction as the worker's next acks.
-- From psql:  select pgqueue.mark_started(array['<job id>']::uuid[], array[<token>]::bigint[]);
create or replace function pgqueue.mark_started(p_ids uuid[], p_tokens bigint[])
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_marked integer;
begin
    if cardinality(p_ids) is distinct from cardinality(p_tokens) then
        raise exception 'pgqueue.mark_started: % ids but % tokens', cardinality(p_ids), cardinality(p_tokens)
            using errcode = '22023';
    end if;
    update pgqueue.jobs j
    set prefetched = false
    from unnest(p_ids, p_tokens) as t(id, token)
    where j.id = t.id and j.token = t.token and j.prefetched;
    get diagnostics v_marked = row_count;
    return v_marked;
end
$$;

comment on function pgqueue.mark_started(uuid[], bigint[]) is
    'pgqueue: clear the prefetched mark of started jobs whose (id, token) still match; their attempt counts.';
