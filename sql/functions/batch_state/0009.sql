-- pgqueue.batch_state(id) -> the progress of one batch: no row when there is none
-- p_id is the batch's id, its callback's id or a member's id. total, pending (members not ended
-- yet), succeeded, failed, cancelled (cancelled or dependency_failed), when it was created and
-- when its last member ended (its callback's release; null while pending > 0).
-- From psql:  select * from pgqueue.batch_state('<batch, callback or member id>');
create or replace function pgqueue.batch_state(p_id uuid)
returns table (id uuid, callback_id uuid, total integer, pending integer, succeeded integer, failed integer,
               cancelled integer, created_at timestamptz, finished_at timestamptz)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select b.id, b.callback_id, b.total, b.pending, b.succeeded, b.failed, b.cancelled, b.created_at, b.finished_at
    from pgqueue.batches b
    where b.id = p_id
       or b.callback_id = p_id
       or b.id = (select m.batch_id from pgqueue.batch_members m where m.job_id = p_id)
    limit 1
$$;

comment on function pgqueue.batch_state(uuid) is
    'pgqueue: a batch''s progress (total, pending, succeeded, failed, cancelled), by batch, callback or member id.';
