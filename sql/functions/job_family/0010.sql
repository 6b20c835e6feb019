-- pgqueue.job_family(job id) -> what a job waits for and what waits for it
-- One row per relation: kind 'parent' (a job it was dispatched to wait for; open: still waited
-- for), 'child' (a job dispatched to wait for it; open: still waiting for it, queued), 'batch' (the
-- batch it is a member of or the callback of; other_id is the batch id). Revision 0010 (issue 26):
-- a child is listed after it stopped waiting too, as long as pgqueue.dependent_jobs keeps it (the
-- history's retention), read through the index dependent_jobs_parents_idx: the line of a chain
-- stays whole after its jobs ended (before, only the children still waiting were listed).
-- From psql:  select * from pgqueue.job_family('<job id>');
create or replace function pgqueue.job_family(p_id uuid)
returns table (kind text, other_id uuid, open boolean)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
    select 'parent', p.id, exists (select 1 from pgqueue.job_dependencies d where d.parent_id = p.id
                                                                          and d.child_id = p_id)
    from pgqueue.dependent_jobs w cross join lateral unnest(w.parents) p(id)
    where w.job_id = p_id
    union all
    select 'child', w.job_id,
           exists (select 1 from pgqueue.job_dependencies d where d.parent_id = p_id and d.child_id = w.job_id)
           and exists (select 1 from pgqueue.jobs j where j.id = w.job_id)
    from pgqueue.dependent_jobs w
    where w.parents @> array[p_id]
    union all
    select 'batch', b.id, b.pending > 0 from pgqueue.batches b
    where b.callback_id = p_id or b.id = (select m.batch_id from pgqueue.batch_members m where m.job_id = p_id)
$$;

comment on function pgqueue.job_family(uuid) is
    'pgqueue: a job''s parents, its children (open: still waiting for it), and its batch.';
