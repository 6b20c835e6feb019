-- pgqueue revision 0013: the table changes of the next features (each function's new version,
-- functions/<name>/0013.sql, runs after this file).

-- issue 28, slot handover: a job granted beyond its queue's free slots waits for one handed over
-- (pgqueue.hand_over) and does not count in the limit until then. A constant default: no rewrite.
alter table pgqueue.jobs add column waiting boolean not null default false;
comment on column pgqueue.jobs.waiting is
    'pgqueue: granted beyond its queue''s free slots (reserve p_waiting): not counted in the limit until handed a slot (hand_over).';
