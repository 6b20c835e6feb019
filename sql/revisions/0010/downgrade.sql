-- pgqueue revision 0010's downgrade to 0009: undoes upgrade.sql, then drops the functions 0010
-- added (each replaced function's previous version runs after this file).
select 1;
