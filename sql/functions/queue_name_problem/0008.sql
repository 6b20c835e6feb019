-- pgqueue.queue_name_problem(name) -> why name is not a valid queue name, or null when it is
-- The queue-name rule of pgqueue/limits.py (queue_name_problem), in SQL, with the same
-- messages: 1 to 200 characters; no comma (`--queue a,b` splits on commas); no control, format
-- or other invisible character and no line or paragraph separator anywhere (the Unicode
-- categories Cc, Cf, Zl, Zp and the default ignorable code points, as the ranges of
-- limits.QUEUE_NAME_REFUSED: a name holding one could look like another, or reorder the text
-- around it in a terminal); no white space at either end (the CLI strips it). Every range is
-- spelled out, so the rule depends neither on the database's locale nor on a Unicode version.
-- The CHECK constraint jobs_queue_name on pgqueue.jobs holds the same rule; enqueue and
-- enqueue_many call this function first so a refusal names the queue, and every function that
-- takes a queue name (pause, resume, set_limits, clear, retry_failed_all, flush_failed) refuses
-- what it refuses.
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
            format('a queue name must be 1 to 200 characters, got %s: %s', length(p_name), pgqueue.shown(p_name))
        when f.bad = ',' then
            format('queue name %s is not valid: a queue name may not contain a comma, which separates queue names '
                   '(--queue high,default)', pgqueue.shown(p_name))
        when f.bad is not null then
            format('queue name %s is not valid: it contains U+%s, and a queue name may not contain control, format '
                   'or other invisible characters, nor line or paragraph separators',
                   pgqueue.shown(p_name), upper(lpad(to_hex(ascii(f.bad)), greatest(4, length(to_hex(ascii(f.bad)))), '0')))
        when left(p_name, 1) ~ '[\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]' then
            format('queue name %s is not valid: it starts with white space (U+%s)',
                   pgqueue.shown(p_name), upper(lpad(to_hex(ascii(left(p_name, 1))), 4, '0')))
        when right(p_name, 1) ~ '[\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]' then
            format('queue name %s is not valid: it ends with white space (U+%s)',
                   pgqueue.shown(p_name), upper(lpad(to_hex(ascii(right(p_name, 1))), 4, '0')))
    end
    from (select substring(p_name from '[,\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]') as bad) as f
$$;

comment on function pgqueue.queue_name_problem(text) is
    'pgqueue: why a text is not a valid queue name (1-200 characters, no comma, control, format or invisible character, no white space at either end), or null.';
