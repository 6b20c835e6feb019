-- pgqueue.never() -> 9999-01-01 00:00:00+00, the available_at of a job that waits
-- A job waiting for its parents (pgqueue.add_dependencies) or a batch's callback waiting for its
-- members (pgqueue.add_batch) is kept out of every reservation by this due time: reserve takes
-- only rows with available_at <= now(), so the reservation path is the same for every job. A
-- finite date, so that every client can read the column.
-- From psql:  select * from pgqueue.jobs where available_at = pgqueue.never();
create or replace function pgqueue.never()
returns timestamptz
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select '9999-01-01 00:00:00+00'::timestamptz
$$;

comment on function pgqueue.never() is
    'pgqueue: the available_at of a job waiting for its parents or its batch (9999-01-01).';
