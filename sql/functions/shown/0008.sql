-- pgqueue.shown(text) -> the text as pgqueue's error messages show it
-- In single quotes, its first 100 characters (then ...), every character the queue-name rule
-- refuses anywhere (pgqueue.queue_name_problem) and every white space but U+0020 written as
-- \uXXXX (\UXXXXXXXX beyond U+FFFF), so a control or bidi character in a refused value cannot
-- garble the message that names it. pgqueue/limits.py (shown) gives the same text.
-- From psql:  select pgqueue.shown(E'mail\u202e');   -- 'mail\u202e'
create or replace function pgqueue.shown(p_text text)
returns text
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
    select '''' || array_to_string(array_agg(
               case when s.c ~ '[\u0001-\u001f\u007f-\u009f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]'
                    then case when ascii(s.c) > 65535 then E'\\U' || lpad(to_hex(ascii(s.c)), 8, '0')
                              else E'\\u' || lpad(to_hex(ascii(s.c)), 4, '0') end
                    else s.c end
               order by s.n), '') || ''''
           || case when length(p_text) > 100 then '...' else '' end
    from regexp_split_to_table(left(p_text, 100), '') with ordinality as s(c, n)
$$;

comment on function pgqueue.shown(text) is
    'pgqueue: a text as error messages show it (quoted, clipped to 100 characters, invisible characters escaped).';
