-- pgqueue revision 0014's downgrade to 0013: undoes upgrade.sql and drops the functions 0014 added
-- (each replaced function's previous version runs after this file).

-- issue 28, slot heirs. reserve 0013, run after, drops and creates only its own signatures. 0013
-- cannot tell which heir of a slot runs: every heir held when the downgrade runs counts as running
-- (waiting = false), so a limit is never exceeded, only under-used until those jobs end.
update pgqueue.jobs set waiting = false where heir_of is not null and token is not null;
drop function if exists pgqueue.reserve(text[], integer, double precision, integer, integer[], uuid[], bigint[]);
drop index if exists pgqueue.jobs_heir_idx;
alter table pgqueue.jobs drop column heir_of_token;
alter table pgqueue.jobs drop column heir_of;
