-- pgqueue revision 0010: what the next features keep in the database (filled in by their changes).
-- Executed by the alembic revision 0010 (migrations/versions/), before its functions.
select 1;
