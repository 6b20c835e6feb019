-- pgqueue revision 0008, downgrade to 0007: undoes 0008_schema.sql and its functions; the
-- migration then runs the frozen copies of the functions 0008 replaced, as 0007 had them.

-- Queue names: the CHECK of revision 0002 (every name the 0008 rule accepts, it accepts too).
alter table pgqueue.jobs drop constraint jobs_queue_name;
alter table pgqueue.jobs add constraint jobs_queue_name check (
    length(queue) between 1 and 200
    and queue ~ '^[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]([^,\u0001-\u001f\u007f]*[^,\u0001-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000])?$'
);
drop function pgqueue.shown(text);
