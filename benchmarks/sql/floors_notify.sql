-- benchmarks/floors.py: one notification on the floors' own channel, committed at once (autocommit).
select pg_notify('pgqueue_floors', %s)
