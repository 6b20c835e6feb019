-- pgqueue.store_result(id, token, result) -> whether the pending result was written
-- The result of a job acked inside context.transaction(): the block's ack left a pending row in
-- pgqueue.job_results carrying the attempt's token; once the handler returns, its value is
-- written here, fenced by that token, and whoever awaits the job is woken (channel
-- pgqueue_ended). A stale holder's block was refused its ack, so it has no pending row and
-- nothing lands.
-- From psql:  select pgqueue.store_result('<job id>', <token>, '{"total": 3}');
create or replace function pgqueue.store_result(p_id uuid, p_token bigint, p_result jsonb)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if p_result is null then
        raise exception 'pgqueue.store_result: the result must be a JSON value (use ''null''::jsonb for none)'
            using errcode = '22023';
    end if;
    update pgqueue.job_results r set result = p_result, token = null
    where r.job_id = p_id and r.token = p_token;
    if not found then
        return false;
    end if;
    perform pg_notify('pgqueue_ended', p_id::text);
    return true;
end
$$;

comment on function pgqueue.store_result(uuid, bigint, jsonb) is
    'pgqueue: write the pending result of a job acked inside its handler''s transaction (fenced by the token).';
