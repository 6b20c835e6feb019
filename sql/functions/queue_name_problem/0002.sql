-- pgqueue.queue_name_problem(name) -> why name is not a valid queue name, or null when it is
-- The queue-name rule of pgqueue/limits.py (queue_name_problem), in SQL: 1 to 200 characters,
-- no comma (`--queue a,b` splits on commas), no control character (U+0000-U+001F, U+007F), and
-- no white space at either end (the CLI strips it). "White space" is spelled out as the
-- characters Python's str.isspace() accepts, so the rule does not depend on the database's
-- locale. The CHECK constraint jobs_queue_name_rule on pgqueue.jobs holds the same rule;
-- enqueue and enqueue_many call this function first so a refusal names the queue.
-- From psql:  select pgqueue.queue_name_problem('reports, daily');
create or replace function pgqueue.queue_name_problem(p_name text)
returns text
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select case
        when p_name is null then 'a queue name must be a string, got null'
        when length(p_name) not between 1 and 200 then
            format('a queue name must be 1 to 200 characters, got %s: %L', length(p_name), p_name)
        when p_name !~ '^[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]([^,\u0001-\u001f\u007f]*[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000])?$' then
            format('queue name %L is not valid: it may not contain a comma or a control character, '
                   'nor start or end with white space', p_name)
    end
$$;

comment on function pgqueue.queue_name_problem(text) is
    'pgqueue: why a text is not a valid queue name (1-200 characters, no comma or control character, no white space at either end), or null.';
