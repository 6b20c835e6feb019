-- pgqueue revision 0015: the table changes of the next features (each function's new version,
-- functions/<name>/0015.sql, runs after this file). None so far: issue 31 changed reserve only.
select 1;
