-- pgqueue.cancelled(ids, tokens) -> per reservation, whether the database recorded its job as cancelled
-- A worker heard on channel pgqueue_cancel that jobs it holds were cancelled. Any role that may
-- connect can send that notification, so the worker stops a handler (or drops a buffered job)
-- only for the pairs this answers true for: the reservation (id, token) is gone from
-- pgqueue.jobs and the job's latest failure is a cancellation, which is what pgqueue.cancel
-- leaves behind (it deletes the row and records the failure in one statement). A reservation
-- that still holds its row, a job that was never cancelled, or one whose cancellation was
-- retried since answers false. One call answers a burst of notifications; it changes nothing.
-- From psql:  select * from pgqueue.cancelled(array['<job id>']::uuid[], array[<token>]::bigint[]);
create or replace function pgqueue.cancelled(p_ids uuid[], p_tokens bigint[])
returns table (id uuid, cancelled boolean)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if cardinality(p_ids) is distinct from cardinality(p_tokens) then
        raise exception 'pgqueue.cancelled: % ids but % tokens', cardinality(p_ids), cardinality(p_tokens)
            using errcode = '22023';
    end if;
    return query
    select t.id,
           not exists (select 1 from pgqueue.jobs j where j.id = t.id and j.token = t.token)
           and coalesce((select f.reason = 'cancelled'
                         from pgqueue.failed_jobs f
                         where f.job_id = t.id
                         order by f.failed_at desc
                         limit 1), false)
    from unnest(p_ids, p_tokens) with ordinality as t(id, token, n)
    order by t.n;
end
$$;

comment on function pgqueue.cancelled(uuid[], bigint[]) is
    'pgqueue: whether each reservation (id, token) was cancelled (its row is gone and its latest failure is a cancellation); a worker checks a pgqueue_cancel notification with it.';
