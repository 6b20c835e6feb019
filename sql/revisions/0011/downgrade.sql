-- pgqueue revision 0011's downgrade to 0010: undoes upgrade.sql and drops the functions 0011 added
-- (each replaced function's previous version runs after this file).

-- issue 27 (WAL)
alter table pgqueue.jobs reset (fillfactor);
alter table pgqueue.workflow_steps add constraint workflow_steps_name_unique unique (job_id, name);
-- end issue 27 (WAL)
