-- pgqueue revision 0013: the table changes of the next features (each function's new version,
-- functions/<name>/0013.sql, runs after this file).
select 1;
