-- The workflows' effects: no unique key, so that a step that ran twice shows as two rows.
create table bench_effects (
    seq int not null,
    step int not null,
    at timestamptz not null default clock_timestamp()
)
