-- pgqueue.unique_requeue() -> trigger
-- Trigger function of jobs_unique_requeue (revision 0003): a job unique while 'queued' goes
-- back to waiting (release, snooze, release_unstarted) while another job of the same key was
-- dispatched during its run. Instead of failing the release with a unique violation, the
-- returning job drops its key (it still runs; the newer job keeps the key).
create or replace function pgqueue.unique_requeue()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if exists (select 1 from pgqueue.jobs j
               where j.unique_key = new.unique_key and j.unique_scope = 'queued'
                 and j.token is null and j.id <> new.id) then
        new.unique_key := null;
        new.unique_scope := null;
    end if;
    return new;
end
$$;

comment on function pgqueue.unique_requeue() is
    'pgqueue: trigger; a queued-unique job going back to waiting drops its key when another job holds it.';
