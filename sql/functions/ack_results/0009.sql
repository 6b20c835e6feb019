-- pgqueue.ack_results(ids, tokens, durations, waits, keep, results, ttls) -> per job, whether the acknowledgement was accepted
-- pgqueue.ack for jobs whose result is kept: in the same transaction as the fenced ack, each
-- accepted job's handler's return value (p_results, JSON; a SQL null marks the result pending,
-- written later by pgqueue.store_result fenced by the same token) goes to pgqueue.job_results for
-- p_ttls seconds, and whoever awaits the job is woken (channel pgqueue_ended, payload: the job
-- id). A refused (stale) pair stores nothing. Jobs whose result is not kept go through plain
-- pgqueue.ack, which this function leaves as it is: they pay nothing for results.
-- From psql:  select * from pgqueue.ack_results(array['<job id>']::uuid[], array[<token>]::bigint[],
--                 null, null, false, array['{"total": 3}']::jsonb[], array[3600]::double precision[]);
create or replace function pgqueue.ack_results(p_ids uuid[], p_tokens bigint[], p_durations double precision[],
                                               p_waits double precision[], p_keep boolean, p_results jsonb[],
                                               p_ttls double precision[])
returns table (id uuid, acked boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_acked boolean[];
    v_done uuid[];
begin
    if cardinality(p_results) is distinct from cardinality(p_ids)
       or cardinality(p_ttls) is distinct from cardinality(p_ids) then
        raise exception 'pgqueue.ack_results: % ids but % results and % ttls', cardinality(p_ids),
                        cardinality(p_results), cardinality(p_ttls)
            using errcode = '22023';
    end if;
    if exists (select 1 from unnest(p_ttls) t(ttl) where not (t.ttl > 0 and t.ttl <= 3153600000)) then
        raise exception 'pgqueue.ack_results: every ttl must be a number of seconds above 0 and up to 3153600000 (100 years)'
            using errcode = '22023';
    end if;
    -- The rows are read in this statement's snapshot, as they were before pgqueue.ack deleted
    -- them; a result is kept only for a pair the ack's fence accepted.
    with acked as (
        select a.id, a.acked, a.n
        from pgqueue.ack(p_ids, p_tokens, p_durations, p_waits, p_keep) with ordinality as a(id, acked, n)
    ),
    given as (
        select t.n, j.id, j.token, j.queue, coalesce(j.envelope->>'name', '?') as name, j.attempts, t.result, t.ttl
        from unnest(p_ids, p_tokens, p_results, p_ttls) with ordinality as t(id, token, result, ttl, n)
        join pgqueue.jobs j on j.id = t.id and j.token = t.token
    ),
    kept as (
        insert into pgqueue.job_results as r (job_id, queue, name, attempts, result, token, expires_at)
        select g.id, g.queue, g.name, g.attempts, g.result, case when g.result is null then g.token end,
               now() + make_interval(secs => g.ttl)
        from given g join acked a on a.n = g.n
        where a.acked
        on conflict (job_id) do update
            set queue = excluded.queue, name = excluded.name, attempts = excluded.attempts, result = excluded.result,
                token = excluded.token, finished_at = excluded.finished_at, expires_at = excluded.expires_at
        returning r.job_id, r.token is null as done
    )
    select array_agg(a.acked order by a.n), (select array_agg(k.job_id) from kept k where k.done)
    into v_acked, v_done
    from acked a;
    perform pg_notify('pgqueue_ended', d::text) from unnest(v_done) as d;
    return query
    select t.id, coalesce(v_acked[t.n], false)
    from unnest(p_ids) with ordinality as t(id, n)
    order by t.n;
end
$$;

comment on function pgqueue.ack_results(uuid[], bigint[], double precision[], double precision[], boolean, jsonb[], double precision[]) is
    'pgqueue: pgqueue.ack that also keeps each accepted job''s result (job_results, for its ttl) and notifies pgqueue_ended.';
