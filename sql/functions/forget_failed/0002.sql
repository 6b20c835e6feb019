-- pgqueue.forget_failed(failure_id) -> whether a record was deleted
-- From psql:  select pgqueue.forget_failed('<failure id>');
create or replace function pgqueue.forget_failed(p_failure_id uuid)
returns boolean
language sql
set search_path = pg_catalog, pg_temp
as $$
    with gone as (delete from pgqueue.failed_jobs f where f.id = p_failure_id returning 1)
    select exists (select 1 from gone)
$$;

comment on function pgqueue.forget_failed(uuid) is 'pgqueue: delete one failure record.';
