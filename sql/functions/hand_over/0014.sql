-- pgqueue.hand_over(from_ids, ids, tokens) -> per waiting job, whether it was handed its slot
-- (revision 0013, issue 28: slot handover)
-- (revision 0014, issue 28: slot heirs. A waiting job granted as an heir (heir_of) is refused
-- here: it takes its slot with no call; and a queue's free slots are counted as pgqueue.reserve 0014
-- counts them: a job and its heirs hold one slot.)
-- A worker that holds jobs of a queue with a concurrency limit may hold more than the limit's
-- free slots, granted waiting by pgqueue.reserve (p_waiting): they do not count in the limit. When
-- one of its jobs of that queue ends with an ack, the worker starts a waiting job of the same queue
-- in the slot that job leaves, at once, and tells the database with that ack, in the same
-- transaction, after it: here, the i-th waiting job (ids[i], fenced by tokens[i]) takes the slot of
-- from_ids[i], so the count of the queue's running jobs does not move and no other reservation can
-- take the slot between the two (a waiting job already gone, acked by the same transaction, counts as
-- handed: it handed its own slot on). With from_ids[i] null, it asks for a free slot instead (a worker
-- whose waiting jobs have no job of theirs running to inherit from): granted only while the queue
-- has one, after the handovers of the same call. A pair is refused (handed = false) when the waiting job is no
-- longer this worker's (its lease ended or was lost, or it was cancelled), when from_ids[i] is
-- still there (its ack was refused: the slot is not the worker's to give), when the queue is
-- paused, or when the queue is at its limit (it was lowered since the slots were granted); the
-- worker then stops handing over in that queue until a reservation grants it slots again, and
-- the refused jobs it already started count again only if a reservation grants them anew.
-- From psql:  select * from pgqueue.hand_over(array['<acked job id>']::uuid[], array['<job id>']::uuid[],
--                                             array[<token>]::bigint[]);
create or replace function pgqueue.hand_over(p_from uuid[], p_ids uuid[], p_tokens bigint[])
returns table (id uuid, handed boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_now timestamptz := clock_timestamp();
    v_ids uuid[];       -- the waiting jobs handed a slot
    v_tokens bigint[];  -- and their tokens
begin
    if cardinality(p_ids) is distinct from cardinality(p_tokens) or cardinality(p_ids) is distinct from cardinality(p_from) then
        raise exception 'pgqueue.hand_over: % from ids, % ids and % tokens: give one of each per job',
                        cardinality(p_from), cardinality(p_ids), cardinality(p_tokens)
            using errcode = '22023';
    end if;
    -- A claim adds a slot: like a reservation, it first locks the rows of its jobs' queues (waiting
    -- for a reservation that holds one to commit), so that the count below sees every slot granted
    -- before and none can be granted beside it. A handover moves a slot and needs no lock: its
    -- transaction's ack frees the slot it takes, and no other transaction sees one without the other.
    if array_position(p_from, null) is not null then
        perform from pgqueue.queues q
        where q.name in (select j.queue from unnest(p_from, p_ids) as t(from_id, id)
                         join pgqueue.jobs j on j.id = t.id where t.from_id is null)
        order by q.name
        for update of q;
    end if;
    -- Every row is found by primary key, one probe per job named (scalar subqueries and `= any`, never
    -- a join the planner could turn into a hash over a scan of the backlog once PL/pgSQL caches a
    -- generic plan).
    with asked as (
        select t.id, t.token, t.n, t.from_id is null as claim,
               (select j.queue from pgqueue.jobs j
                where j.id = t.id and j.token = t.token and j.waiting and j.heir_of is null
                  and j.available_at > v_now) as queue
        from unnest(p_from, p_ids, p_tokens) with ordinality as t(from_id, id, token, n)
        where t.from_id is null or (select count(*) from pgqueue.jobs f where f.id = t.from_id) = 0
    ),
    room as materialized (
        -- Each queue's free slots now (the acks of this transaction counted): a limit lowered
        -- since, or a pause, stops the handover. Materialized: counted once per queue, not once per
        -- job named (inlined, the count ran for every row of ranked).
        select a.queue,
               case when q.paused then 0
                    when q.concurrency is null then 2147483647
                    else q.concurrency - (select count(distinct (coalesce(r.heir_of, r.id),
                                                                 coalesce(r.heir_of_token, r.token)))
                                          from pgqueue.jobs r
                                          where r.queue = a.queue and r.token is not null
                                            and r.available_at > v_now
                                            and (not r.waiting or r.heir_of is not null))::integer
               end as free
        from (select distinct asked.queue from asked where asked.queue is not null) a
        left join pgqueue.queues q on q.name = a.queue
    ),
    ranked as (
        select a.id, a.token, row_number() over (partition by a.queue order by a.claim, a.n) as k, r.free
        from asked a join room r on r.queue = a.queue
    )
    select array_agg(k.id), array_agg(k.token) into v_ids, v_tokens from ranked k where k.k <= k.free;
    -- Tokens are unique to a reservation: id and token both in the lists is the pair's fence.
    update pgqueue.jobs j set waiting = false
    where j.id = any (v_ids) and j.token = any (v_tokens) and j.waiting and j.heir_of is null;
    -- A waiting job that is gone (acked in this same transaction, when it ended too and handed its
    -- own slot on) is no concern: nothing counts it any more. Only a claim needs its job.
    return query
    select t.id, t.id = any (coalesce(v_ids, '{}'))
                 or (t.from_id is not null and (select count(*) from pgqueue.jobs g where g.id = t.id) = 0)
    from unnest(p_from, p_ids) with ordinality as t(from_id, id, n)
    order by t.n;
end
$$;

comment on function pgqueue.hand_over(uuid[], uuid[], bigint[]) is
    'pgqueue: a waiting job (id, token) takes the slot of a job of its queue acked in the same transaction; '
    'refused when it is no longer the caller''s, the acked job is still there, the queue is paused or at its limit, '
    'or it waits as the heir of a job (heir_of: it takes that slot with no call).';
