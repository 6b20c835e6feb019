-- pgqueue revision 0014's downgrade to 0013: undoes upgrade.sql and drops the functions 0014 added
-- (each replaced function's previous version runs after this file).

-- issue 28, slot heirs. reserve 0013, run after, drops and creates only its own signatures. A job
-- still waiting as an heir when the downgrade runs keeps waiting = true: 0013 counts it only once
-- handed a slot (hand_over), which it never is; its lease runs out and it is reserved again.
drop function if exists pgqueue.reserve(text[], integer, double precision, integer, integer[], uuid[], bigint[]);
drop index if exists pgqueue.jobs_heir_idx;
alter table pgqueue.jobs drop column heir_of_token;
alter table pgqueue.jobs drop column heir_of;
