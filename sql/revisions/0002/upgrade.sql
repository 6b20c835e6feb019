-- pgqueue schema, revision 0002: the queue-name rule of pgqueue/limits.py as a CHECK.
-- Executed by the alembic revision 0002 (migrations/versions/), before its functions.
--
-- A queue name is 1 to 200 characters, has no comma (`--queue a,b` splits on commas), no
-- control character (U+0001-U+001F, U+007F) and no white space at either end (the CLI strips
-- it; white space is spelled out as the characters Python's str.isspace() accepts, so the
-- rule does not depend on the database's locale). Revision 0001 only checked the length, so a
-- job could be dispatched to a queue no worker started from the command line can serve.
--
-- Existing jobs are checked, not grandfathered: a NOT VALID constraint would still refuse
-- every later update of such a row, so reserve, release and extend would fail on it. If any
-- job breaks the rule the migration stops here, changes nothing, and says what to do.
do $$
declare
    v_count bigint;
    v_queues text;
begin
    -- Built-ins are qualified: this block runs with the migrating role's search_path.
    select count(*), pg_catalog.string_agg(distinct pg_catalog.format('%L', j.queue), ', ')
    into v_count, v_queues
    from pgqueue.jobs j
    where j.queue !~ '^[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]([^,\u0001-\u001f\u007f]*[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000])?$';
    if v_count > 0 then
        raise exception 'pgqueue migration 0002: % job(s) in pgqueue.jobs have a queue name no worker can serve (a comma, a control character, or white space at either end): %',
                        v_count, v_queues
            using errcode = '23514',
                  hint = 'Nothing was changed. Move those jobs to a valid queue name, e.g. '
                         'update pgqueue.jobs set queue = ''fixed'', envelope = jsonb_set(envelope, ''{queue}'', ''"fixed"'') where queue = ''<bad name>''; '
                         'or remove them with select pgqueue.clear(''<bad name>''); then migrate again.';
    end if;
end
$$;

alter table pgqueue.jobs drop constraint jobs_queue_name;
alter table pgqueue.jobs add constraint jobs_queue_name check (
    length(queue) between 1 and 200
    and queue ~ '^[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]([^,\u0001-\u001f\u007f]*[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000])?$'
);
