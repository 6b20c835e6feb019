-- pgqueue revision 0011: the table changes of the next features (each function's new version,
-- functions/<name>/0011.sql, runs after this file).
select 1;
