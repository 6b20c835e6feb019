-- pgqueue revision 0010: what the next features keep in the database (filled in by their changes).
-- Executed by the alembic revision 0010 (migrations/versions/), before its functions.
select 1;

-- issue 28: priority aging (pgqueue.set_aging, pgqueue.aged_priority, read by pgqueue.reserve)
alter table pgqueue.queues add column aging interval,
    add constraint queues_aging check (aging is null or aging > interval '0');
