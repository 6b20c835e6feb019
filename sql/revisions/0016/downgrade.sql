-- pgqueue revision 0016's downgrade to 0015: undoes upgrade.sql and drops the functions 0016 added
-- (each replaced function's previous version runs after this file). None.
select 1;
