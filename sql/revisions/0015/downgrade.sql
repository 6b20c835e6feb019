-- pgqueue revision 0015's downgrade to 0014: undoes upgrade.sql and drops the functions 0015 added
-- (each replaced function's previous version runs after this file). None so far.
select 1;
