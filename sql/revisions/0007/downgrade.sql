-- pgqueue revision 0007, downgrade to 0006: undoes 0007_schema.sql and its functions; the
-- migration then runs 0006's frozen reserve again (the three-argument one, a plpgsql function).
drop function pgqueue.mark_started(uuid[], bigint[]);
drop function pgqueue.reserve(text[], integer, double precision);
drop function pgqueue.reserve(text[], integer, double precision, integer);
alter table pgqueue.jobs drop column prefetched;
