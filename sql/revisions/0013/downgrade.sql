-- pgqueue revision 0013's downgrade to 0012: undoes upgrade.sql and drops the functions 0013 added
-- (each replaced function's previous version runs after this file).

-- issue 28, slot handover. reserve 0011, run after, drops and creates only its own signatures.
drop function if exists pgqueue.hand_over(uuid[], uuid[], bigint[]);
drop function if exists pgqueue.reserve(text[], integer, double precision, integer, integer[]);
alter table pgqueue.jobs drop column waiting;
