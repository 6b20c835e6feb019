-- pgqueue.add_batch(batch id, members, callback) -> nothing
-- Makes p_members (jobs just enqueued in this transaction) a batch whose callback p_callback (a
-- job just enqueued too) runs exactly once, when every member has ended: succeeded, failed
-- terminally or cancelled. The callback waits with available_at = pgqueue.never(); each member is
-- marked has_dependents, so its end (ack, fail, cancel, the reservation's doomed path) counts it
-- in pgqueue.batches through pgqueue.jobs_ended, and the count that reaches 0 releases the
-- callback. Bad input (an empty or null member list, a member or callback that is not a waiting
-- job, a member already in a batch, the callback among the members) is refused, naming it
-- (SQLSTATE 22023), and nothing changes. Revision 0010: a member or callback holding a unique key
-- or a debounce key is refused too (pgqueue.enqueue_unique and enqueue_debounced return the job
-- already holding the key for a duplicate: it must not silently be counted in the batch).
-- From psql:  select pgqueue.add_batch(gen_random_uuid(), array['<member>', ...]::uuid[], '<callback>');
create or replace function pgqueue.add_batch(p_batch uuid, p_members uuid[], p_callback uuid)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_bad uuid;
    v_total integer;
    v_marked integer;
begin
    if p_batch is null or p_callback is null or cardinality(p_members) is null
       or array_position(p_members, null) is not null then
        raise exception 'pgqueue.add_batch: give a batch id, at least one member (none null) and a callback'
            using errcode = '22023';
    end if;
    if p_callback = any (p_members) then
        raise exception 'pgqueue.add_batch: the callback % cannot be a member of its own batch', p_callback
            using errcode = '22023';
    end if;
    -- issue 26: a key's holder is another job (the duplicate's dispatch returned its id)
    select c into v_bad from unnest(p_members || p_callback) c
    where exists (select 1 from pgqueue.jobs j where j.id = c and (j.unique_key is not null or j.debounce_key is not null))
    limit 1;
    if found then
        raise exception 'pgqueue.add_batch: job % holds a unique or debounce key, so it cannot join a batch (a dispatch with that key may have returned it for a duplicate)',
                        v_bad
            using errcode = '22023';
    end if;
    v_total := cardinality(array(select distinct m from unnest(p_members) m));
    -- The checks ride on the writes (one pass over the members): a refusal raises, and the whole
    -- call, writes included, is undone.
    update pgqueue.jobs j set has_dependents = true where j.id = any (p_members) and j.token is null;
    get diagnostics v_marked = row_count;
    update pgqueue.jobs j set available_at = pgqueue.never() where j.id = p_callback and j.token is null;
    if v_marked <> v_total or not found then
        select c into v_bad from unnest(p_members || p_callback) c
        where not exists (select 1 from pgqueue.jobs j where j.id = c and j.token is null)
        limit 1;
        raise exception 'pgqueue.add_batch: job % is not a queued job (only jobs just dispatched, not running, can join a batch)',
                        v_bad
            using errcode = '22023';
    end if;
    insert into pgqueue.batches (id, callback_id, total, pending) values (p_batch, p_callback, v_total, v_total);
    insert into pgqueue.batch_members (job_id, batch_id)
    select distinct m, p_batch from unnest(p_members) m
    on conflict (job_id) do nothing;
    get diagnostics v_marked = row_count;
    if v_marked <> v_total then
        select m.job_id into v_bad from pgqueue.batch_members m
        where m.job_id = any (p_members) and m.batch_id <> p_batch limit 1;
        raise exception 'pgqueue.add_batch: job % is already a member of a batch', v_bad using errcode = '22023';
    end if;
end
$$;

comment on function pgqueue.add_batch(uuid, uuid[], uuid) is
    'pgqueue: make just-dispatched jobs a batch whose callback job runs once, when every member has ended.';
