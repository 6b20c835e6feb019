-- pgqueue at head, after the functions: the triggers, as they are after the newest revision.
-- A fresh database at head runs sql/head/schema.sql, the newest version of every function, then
-- this file (a trigger needs its function). The revisions themselves never run it.

-- A 'queued' job that goes back to waiting (release, snooze, release_unstarted) while another
-- job of its key was dispatched during its run drops its key instead of failing the update:
-- both then run, and the newer one keeps the key. The WHEN clause is evaluated without calling
-- the function, so jobs without a key pay nothing.
create trigger jobs_unique_requeue
    before update of token on pgqueue.jobs
    for each row
    when (new.unique_scope = 'queued' and new.token is null and old.token is not null)
    execute function pgqueue.unique_requeue();

-- issue 28: debounce. A debounced job leaves its window when it is first reserved (drops its key),
-- so a running job is never changed by a later dispatch of its key.
create trigger jobs_debounce_reserved
    before update of token on pgqueue.jobs
    for each row
    when (new.debounce_key is not null and new.token is not null)
    execute function pgqueue.debounce_reserved();

-- issue 26: results. The end of a job (failed or cancelled) wakes whoever awaits it (channel
-- pgqueue_ended, payload: the job id), and its failure becomes an attempt of its history.
create trigger failed_jobs_recorded
    after insert on pgqueue.failed_jobs
    for each row
    execute function pgqueue.failure_recorded();
