-- pgqueue revision 0012: the table changes of the next features (each function's new version,
-- functions/<name>/0012.sql, runs after this file).
select 1;
