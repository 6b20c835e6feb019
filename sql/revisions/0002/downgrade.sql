-- pgqueue revision 0002, downgrade to 0001: undoes 0002_schema.sql and drops every function
-- revision 0001 did not install (a function 0002 added). The migration then runs 0001's
-- frozen function files again, which restores their bodies and settings (CREATE OR REPLACE
-- without a SET clause also clears the pinned search_path).
alter table pgqueue.jobs drop constraint jobs_queue_name;
alter table pgqueue.jobs add constraint jobs_queue_name check (length(queue) between 1 and 200);

do $$
declare
    v_function regprocedure;
begin
    -- Built-ins are qualified: this block runs with the migrating role's search_path.
    for v_function in
        select p.oid::regprocedure
        from pg_catalog.pg_proc p
        where p.pronamespace = 'pgqueue'::regnamespace
          and p.proname || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')' not in (
              'enqueue(jsonb, double precision)',
              'enqueue_many(jsonb, double precision[])',
              'reserve(text[], integer, double precision)',
              'ack(uuid[], bigint[])',
              'release(uuid, bigint, double precision)',
              'release_unstarted(uuid[], bigint[])',
              'extend(uuid, bigint, double precision)',
              'fail(uuid, bigint, text, text, text, text)',
              'record_failure(jsonb, integer, text, text, text, text)',
              'retry_failed(uuid)',
              'retry_failed_all(text)',
              'forget_failed(uuid)',
              'flush_failed(text, interval)',
              'clear(text)',
              'next_due(text[])')
    loop
        execute pg_catalog.format('drop function %s', v_function);
    end loop;
end
$$;
