-- pgqueue.flush_failed(queue, older_than) -> number of failure records deleted
-- Deletes failure records of one queue (or all when p_queue is null), optionally only
-- those older than p_older_than.
-- From psql:  select pgqueue.flush_failed(null, interval '24 hours');
create or replace function pgqueue.flush_failed(p_queue text default null, p_older_than interval default null)
returns bigint
language sql
as $$
    with gone as (
        delete from pgqueue.failed_jobs f
        where (p_queue is null or f.queue = p_queue)
          and (p_older_than is null or f.failed_at < now() - p_older_than)
        returning 1
    )
    select count(*) from gone
$$;

comment on function pgqueue.flush_failed(text, interval) is
    'pgqueue: delete failure records of a queue (or all), optionally only those older than an interval.';
