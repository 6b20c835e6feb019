-- pgqueue revision 0013's downgrade to 0012: undoes upgrade.sql and drops the functions 0013 added
-- (each replaced function's previous version runs after this file).
select 1;
