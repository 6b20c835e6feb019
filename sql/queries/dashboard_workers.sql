-- The sessions of this database that LISTEN on pgqueue's channel (running workers; see
-- listening_workers.sql for who is not seen), with who they are and since when.
-- Without pg_read_all_stats, other users' sessions hide their query text: a lower bound then.
select pid, usename::text, application_name, client_addr::text, client_hostname, backend_start,
       extract(epoch from now() - backend_start)::double precision as connected_seconds,
       state, state_change
from pg_stat_activity
where datname = current_database()
  and pid <> pg_backend_pid()
  and query ilike 'listen%pgqueue%'
order by backend_start, pid
