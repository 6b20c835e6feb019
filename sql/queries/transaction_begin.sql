-- context.transaction(): BEGIN the block's transaction and read its id, in one round trip (two
-- statements in one simple query), so that ack_in_transaction.sql can tell whether the ack still
-- runs in that transaction.
begin;
select pg_current_xact_id()::text
