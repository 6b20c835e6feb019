-- pgqueue revision 0016: the table changes of the next features (each function's new version,
-- functions/<name>/0016.sql, runs after this file). None: issue 28 changed reserve_partitions only.
select 1;
