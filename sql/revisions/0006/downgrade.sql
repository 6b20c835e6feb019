-- pgqueue revision 0006, downgrade to 0005: undoes 0006_schema.sql; the migration then runs
-- 0004's frozen set_limits and 0005's reserve again. Buckets go back to a capacity of one token.
drop function pgqueue.set_limits(text, integer, integer, double precision, integer);
alter table pgqueue.queues drop column rate_burst;
update pgqueue.queues set rate_tokens = least(1.0, rate_tokens);
