-- One step's database write (benchmarks/workflows.py): the same insert in both systems, made in
-- the step's own transaction (DBOS: its datasource transaction; pgqueue: context.transaction).
insert into bench_effects (seq, step) values (%s, %s)
