-- pgqueue.partition_problem(value) -> why value is not a valid partition, or null when it is
-- The partition rule of pgqueue/limits.py (partition_problem), in SQL, with the same
-- messages (but for a value that is not a string, shown as JSON): a string of 1 to 200 characters, none of them a control, format or other invisible
-- character (the ranges of limits.QUEUE_NAME_REFUSED; unlike a queue name it may hold commas and
-- white space). The CHECK constraint jobs_partition on pgqueue.jobs holds the same rule; enqueue,
-- enqueue_many and the partition functions call this one first so a refusal names the value.
-- From psql:  select pgqueue.partition_problem('"tenant:42"');
create or replace function pgqueue.partition_problem(p_value jsonb)
returns text
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select case
        when jsonb_typeof(p_value) is distinct from 'string' then
            format('a partition must be a string, got %s', coalesce(left(p_value::text, 100), 'null'))
        when length(v.text) not between 1 and 200 then
            format('a partition must be 1 to 200 characters, got %s: %s', length(v.text), pgqueue.shown(v.text))
        when v.bad is not null then
            format('partition %s is not valid: it contains U+%s, and a partition may not contain control, format '
                   'or other invisible characters',
                   pgqueue.shown(v.text), upper(lpad(to_hex(ascii(v.bad)), greatest(4, length(to_hex(ascii(v.bad)))), '0')))
    end
    from (select t.text, substring(t.text from '[\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]') as bad
          from (select p_value #>> '{}' as text) t) v
$$;

comment on function pgqueue.partition_problem(jsonb) is
    'pgqueue: why a JSON value is not a valid partition (a string of 1-200 characters, no control or invisible character), or null.';
