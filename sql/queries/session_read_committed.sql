-- A new connection of pgqueue's pool (issue 27): its statements run READ COMMITTED whatever the
-- database's or role's default_transaction_isolation. Under SERIALIZABLE, SKIP LOCKED reservations,
-- dispatches and fenced updates beside one another fail with serialization failures (40001);
-- under REPEATABLE READ a row changed since a statement's snapshot does. Not sent behind a
-- transaction pooler, where a session setting would reach other clients' server connections.
select set_config('default_transaction_isolation', 'read committed', false)
