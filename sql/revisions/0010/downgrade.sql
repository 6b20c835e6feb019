-- pgqueue revision 0010's downgrade to 0009: undoes upgrade.sql, then drops the functions 0010
-- added (each replaced function's previous version runs after this file).

-- issue 27: durable workflows
drop function if exists pgqueue.workflow_checkpoint(uuid, bigint, integer, text, text, jsonb, double precision, text);
drop function if exists pgqueue.workflow_step_failed(uuid, bigint, integer, text, text, integer, double precision);
drop function if exists pgqueue.workflow_wait(uuid, bigint, integer, text, text, text, double precision);
drop function if exists pgqueue.workflow_child(uuid, bigint, integer, text, jsonb, double precision);
drop function if exists pgqueue.workflow_steps_of(uuid);
drop function if exists pgqueue.signal(uuid, text, jsonb);
drop function if exists pgqueue.prune_workflows(integer);
drop view if exists pgqueue.workflows;
drop table if exists pgqueue.workflow_signals;
drop table if exists pgqueue.workflow_steps;
