-- issue 27: pgqueue.workflow_checkpoint(id, token, seq, name, kind, result, seconds[, began]) -> 'recorded' | 'not_yours' | 'conflict'
-- Records that the seq-th step of a workflow succeeded with p_result (JSON), fenced by the job's
-- token like an ack: only the holder of the current reservation records ('not_yours' else, nothing
-- changed). The job's row stays locked until the caller's transaction ends, so a checkpoint written
-- inside context.transaction() commits with the block's writes, or neither does, and no other
-- worker can take the job over in between. 'conflict': another step holds that seq or that name
-- (the code changed between runs), or the step already succeeded; nothing changed. p_seconds: how
-- long the step ran (its started_at is that long before now; null: now).
-- With p_began (context.transaction(): the mark the block set on its transaction, the
-- transaction-local setting pgqueue.workflow_block) a refusal is an error instead, so that a COMMIT
-- sent with this statement (one round trip) cannot commit the block's writes without their
-- checkpoint: SQLSTATE PGQ10 not_yours, PGQ11 conflict, PGQ12 when the current transaction is not
-- the block's any more (the handler ended it inside the block: the mark went with it).
-- From psql:  select pgqueue.workflow_checkpoint('<job id>', <token>, 1, 'charge', 'step', '{"ok": true}', 0.2);
create or replace function pgqueue.workflow_checkpoint(p_id uuid, p_token bigint, p_seq integer, p_name text,
                                                       p_kind text, p_result jsonb,
                                                       p_seconds double precision, p_began text default null)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_step record;  -- issue 27 (WAL)
    v_found boolean;
    v_conflict boolean;
begin
    if p_kind is null or p_kind not in ('step', 'transaction') then
        raise exception 'pgqueue.workflow_checkpoint: kind must be step or transaction, got %', coalesce(p_kind, 'null')
            using errcode = '22023';
    end if;
    -- issue 27: a mark, not the transaction's id, so a pipelined block need not read anything first.
    if p_began is not null and current_setting('pgqueue.workflow_block', true) is distinct from p_began then
        raise exception 'pgqueue.workflow_checkpoint: ended (the transaction is not the one the block began)'
            using errcode = 'PGQ12';
    end if;
    perform 1 from pgqueue.jobs j where j.id = p_id and j.token = p_token for update;
    if not found then
        if p_began is not null then
            raise exception 'pgqueue.workflow_checkpoint: not_yours' using errcode = 'PGQ10';
        end if;
        return 'not_yours';
    end if;
    -- issue 27 (WAL): the job's row is locked, and every writer of a workflow's steps takes that lock
    -- first (the fenced functions), so no other step of it is written meanwhile: the step's place is
    -- read, then its row inserted or updated, with no speculative insertion (an ON CONFLICT insert
    -- logs a confirmation record per step). The name check reads the job's steps through the primary
    -- key (job_id, seq): there is no (job_id, name) index to keep up any more, one index entry less
    -- per step. The primary key still refuses a second row at a seq.
    select s.name, s.kind, s.state into v_step from pgqueue.workflow_steps s where s.job_id = p_id and s.seq = p_seq;
    v_found := found;
    if v_found then
        v_conflict := v_step.name <> p_name or v_step.kind <> p_kind or v_step.state = 'succeeded';
    else
        v_conflict := exists (select 1 from pgqueue.workflow_steps s where s.job_id = p_id and s.name = p_name);
    end if;
    if v_conflict then
        if p_began is not null then
            raise exception 'pgqueue.workflow_checkpoint: conflict' using errcode = 'PGQ11';
        end if;
        return 'conflict';
    end if;
    if v_found then  -- a step that failed before, or a retry of a failed one
        update pgqueue.workflow_steps s
        set state = 'succeeded', result = p_result, error = null, attempts = s.attempts + 1,
            ended_at = clock_timestamp()
        where s.job_id = p_id and s.seq = p_seq;
    else
        insert into pgqueue.workflow_steps (job_id, seq, name, kind, state, result, attempts, started_at, ended_at)
        values (p_id, p_seq, p_name, p_kind, 'succeeded', p_result, 1,
                clock_timestamp() - make_interval(secs => coalesce(least(greatest(p_seconds, 0), 315360000), 0)),
                clock_timestamp());
    end if;
    -- end issue 27 (WAL)
    return 'recorded';
end
$$;

comment on function pgqueue.workflow_checkpoint(uuid, bigint, integer, text, text, jsonb, double precision, text) is
    'pgqueue: record a workflow step''s result, fenced by the job''s token (issue 27).';
