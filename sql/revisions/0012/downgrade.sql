-- pgqueue revision 0012's downgrade to 0011: undoes upgrade.sql and drops the functions 0012 added
-- (each replaced function's previous version runs after this file).
select 1;
