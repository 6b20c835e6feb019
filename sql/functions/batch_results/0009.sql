-- pgqueue.batch_results(batch id) -> one row per member of the batch
-- Each member's id, how it ended (null: not yet; succeeded, failed, cancelled) and its result
-- (jsonb; null unless it succeeded and kept its result). p_id may also be the callback's id.
-- From psql:  select * from pgqueue.batch_results('<batch or callback id>');
create or replace function pgqueue.batch_results(p_id uuid)
returns table (job_id uuid, outcome text, result jsonb)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select m.job_id, m.outcome, r.result
    from pgqueue.batches b
    join pgqueue.batch_members m on m.batch_id = b.id
    left join pgqueue.job_results r on r.job_id = m.job_id and r.token is null
    where b.id = p_id or b.callback_id = p_id
    order by m.job_id
$$;

comment on function pgqueue.batch_results(uuid) is
    'pgqueue: the members of a batch, how each ended and its kept result.';
