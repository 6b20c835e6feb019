-- pgqueue.parent_results(job id) -> one row per parent of a job dispatched with parents
-- In the order the parents were given: the parent's id, its state as far as known ('succeeded'
-- with its kept result, 'failed' or 'cancelled' from its latest failure record, 'running' while
-- its result is pending, else null: still open, or its result not kept) and its result (jsonb;
-- null when not kept). No rows for a job without parents.
-- From psql:  select * from pgqueue.parent_results('<job id>');
create or replace function pgqueue.parent_results(p_id uuid)
returns table (parent_id uuid, state text, result jsonb)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select p.id,
           case when r.job_id is not null then case when r.token is null then 'succeeded' else 'running' end
                when f.reason in ('cancelled', 'dependency_failed') then 'cancelled'
                when f.reason is not null then 'failed' end,
           r.result
    from pgqueue.dependent_jobs w
    cross join lateral unnest(w.parents) with ordinality as p(id, n)
    left join pgqueue.job_results r on r.job_id = p.id
    left join lateral (select f.reason from pgqueue.failed_jobs f where f.job_id = p.id
                       order by f.failed_at desc limit 1) f on true
    where w.job_id = p_id
    order by p.n
$$;

comment on function pgqueue.parent_results(uuid) is
    'pgqueue: the parents of a dependent job, each with its state as known and its kept result.';
