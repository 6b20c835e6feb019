-- Connections to the measured database, by state (the caller's own is on another database).
select coalesce(state, '?'), count(*) from pg_stat_activity where datname = %s group by 1
