-- pgqueue.debounce_reserved() -> trigger (before update of token on pgqueue.jobs, per row)
-- Issue 28: a debounced job leaves its window for good when it is first reserved: the key is
-- cleared, so the job no longer holds jobs_debounce_idx, and no later dispatch of the key can
-- change it (it starts a new window instead). The job is never debounced again, even if it goes
-- back to waiting (a retry, a snooze, a prefetch given back). The key stays readable in the
-- envelope (envelope->>'debounce_key'). The trigger's WHEN clause is evaluated without calling
-- this function, so jobs that were not debounced pay nothing.
create or replace function pgqueue.debounce_reserved()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    new.debounce_key := null;
    new.debounce_until := null;
    return new;
end
$$;

comment on function pgqueue.debounce_reserved() is
    'pgqueue: trigger; a debounced job leaves its window (drops its debounce key) when it is reserved.';
