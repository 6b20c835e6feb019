-- How many sessions of this database LISTEN on pgqueue's channel: one per running worker
-- (workers started with listen=False, or listening through another server, are not seen).
-- Without pg_read_all_stats, other users' sessions hide their query text: a lower bound then.
select count(*)::int
from pg_stat_activity
where datname = current_database()
  and pid <> pg_backend_pid()
  and query ilike 'listen%pgqueue%'
