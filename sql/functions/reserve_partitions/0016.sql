-- pgqueue.reserve_partitions(queue row, priority, take, now, ready_by) -> ids, doomed, cursor, credit, lost
-- Issue 28: pgqueue.reserve's first step for a queue served by partition (queues.partitioned),
-- called with the queue's row locked (so every reservation of the queue, by any worker on any
-- host, sees the grants committed before it and none beside it) and given that row (revision
-- 0010: it read the row again). It picks up to p_take ready jobs of one priority, partition by
-- partition, and locks them (FOR UPDATE SKIP LOCKED); ready: due by p_ready_by (p_now, or
-- earlier under priority aging: pgqueue.aged_priority).
-- - Each partition may get at most its concurrency limit minus its jobs running (reserved, lease
--   live) and at most the tokens of its bucket (its override in pgqueue.partitions, else the
--   queue's partition_concurrency / partition_rate_*); the tokens it gets are spent here (a
--   candidate the caller then moves to failed_jobs spends one too).
-- - Weighted round robin: the partitions with jobs of this priority are visited in the order of
--   their names, one turn each, round after round, continuing after the partition served last
--   (queues.partition_cursor, shared by every worker). A turn gives a partition up to weight x r
--   jobs (weight: its override, default 1; r = 1 in a call's first round; each later round of
--   the same call shares what is left over the weights of the partitions that took their whole
--   turn, so a call that asks for many jobs needs few rounds; a round that starts at the first
--   partition and finds fewer of them than r's turns fill shares what is left among them at once,
--   revision 0010). A turn cut short
--   because the call had no more room keeps the rest as queues.partition_credit: the next call
--   goes on with it. So between partitions that stay ready and under their limits, the jobs
--   reserved differ from the proportion of their weights by at most one turn each.
-- - The turns go k at a time (revision 0010): one statement walks the next k partitions (k x r
--   <= what is left; revision 0011: one ordered scan of the next 2k index entries, at most 128,
--   then one index probe per partition past them), and one statement takes their k turns: reads what
--   each may get (its limits, as pgqueue.partition_allowance reads them; fair shares alone, no
--   per-partition limit and no row in pgqueue.partitions: every weight 1 and no cap, without a
--   look-up), cuts the turns to what is left, in walk order, and locks their jobs (0009: two to
--   four statements per turn).
-- - Jobs of the queue without a partition come after the round, looked for among the oldest
--   p_take + 100 ready jobs of the priority only (a scan past a partition's backlog would cost a
--   heap visit per job): in a queue served by partition, give every job a partition.
-- Returns the ids (in the order granted), whether any of them may not run again (doomed: the
-- caller moves those to failed_jobs), and the queue's cursor and credit as they are now; revision
-- 0011: and whether any of them has a lease that expired unended (lost: token set, not prefetched;
-- the caller records that attempt), read from the rows it locks, so the caller no longer looks up
-- every granted job again by id to find out (a probe per job).
-- Revision 0013 (issue 28 (a)): the same decisions, in the same order, for less work per partition
-- visited (with 1,000 partitions capped at 2, a reservation of 450 visits 450 partitions and takes
-- one job of each): the walk reads the id of each partition's first job, and a turn of one job
-- locks that job by primary key instead of probing the partition's range again (the probe stays for
-- larger turns and when that job is no longer a candidate); a walk's running jobs (where some
-- partition has a concurrency limit) are counted in one range scan of jobs_partition_running_idx
-- instead of a probe per partition; what the turns gave is read in one pass over them instead of a
-- scan per figure; the call's first walk with jobs keeps its grants as they are instead of merging
-- them into empty arrays. Same signature as 0011 (create or replace).
-- Revision 0016 (issue 28, no collapse under per-partition limits): a queue with per-partition
-- limits but no fair shares (queues.partition_fair off and no partition with a weight other than 1)
-- is served in due order, each partition within its limits, the way one reserves from a plain queue:
-- one ordered read of the oldest p_take + 100 ready jobs of the priority (jobs_reservation_idx),
-- locked as read (FOR UPDATE SKIP LOCKED), each partition among them allowed what its limits leave
-- (the queue's running jobs counted by partition in one scan, its override and its bucket read once),
-- the jobs allowed granted in due order. Only when that read was full (p_take + 100 jobs) and did not
-- fill the call (the oldest jobs are a partition's at its limit) does the round robin walk below
-- take what is left, so one
-- partition's backlog at its limit never holds the others back. Fair shares (partition_fair, or a
-- weight) keep the walk alone, as before. With 1,000 partitions capped at 2 a reservation of 450 used
-- to visit 450 partitions (an index probe and a turn each); now it reads 550 index entries in order.

create or replace function pgqueue.reserve_partitions(p_control pgqueue.queues, p_priority smallint, p_take integer,
                                                      p_now timestamptz, p_ready_by timestamptz,
                                                      out ids uuid[], out doomed boolean,
                                                      out cursor_at text, out credit integer, out lost boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
-- issue 28: its statements take arrays whose length a custom plan sees, so plpgsql would plan the
-- walk's statement afresh on every call (a custom plan looks cheaper than the generic one for a
-- walk of one partition); the generic plans are the ones tested (tests/test_partitions.py).
set plan_cache_mode = force_generic_plan
as $$
declare
    p_queue text := p_control.name;
    v_got uuid[];
    v_got_doomed boolean;
    v_got_lost boolean;
    v_left integer := p_take;
    v_names text[] := '{}';                  -- the partitions given jobs in this call, and for each:
    v_tokens double precision[] := '{}';     -- its bucket (null: no rate)
    v_given integer[] := '{}';               -- the jobs it was given
    v_part text;
    v_last text;
    v_round integer := 1;
    v_credit integer;
    v_credit_left integer;
    v_full_weight integer := 0;
    v_whole_round boolean;
    v_plain boolean;
    v_capped boolean;                        -- some partition has a concurrency limit
    v_walk text[];
    v_first_ids uuid[];                      -- per partition of the walk: its first job (null: not read)
    v_quantum integer;                       -- a walk of one turn going on: its size (null: weight x r)
    v_want integer;                          -- the partitions a walk looks for (k)
    v_dense integer;                         -- the index entries it reads in one scan first
    v_round_granted integer := 0;
    -- what one walk gave: in all, per partition, the partition served last, the turn cut short
    v_count integer;
    v_w_names text[];
    v_w_tokens double precision[];
    v_w_got integer[];
    v_w_last text;
    v_w_full integer;
    v_cut text;
    v_cut_rest integer;
    v_fifo boolean;                          -- revision 0016: limits without fair shares: due order first
    v_window integer;                        -- the ready jobs its read looks at
    v_window_full boolean := true;           -- whether that read found that many (else it saw them all)
    v_rated boolean;                         -- some partition has a rate: its bucket is spent below
begin
    ids := '{}';
    doomed := false;
    lost := false;
    v_last := coalesce(p_control.partition_cursor, '');
    v_part := v_last;
    -- The partition served last may have a part of its turn left (it was cut short by p_take).
    v_credit := case when v_last <> '' then p_control.partition_credit else 0 end;
    v_credit_left := 0;
    v_whole_round := v_last = '';
    -- Fair shares alone (no per-partition limit, no override row): every partition may take
    -- all and weighs 1, known without a look-up per partition.
    v_plain := p_control.partition_concurrency is null and p_control.partition_rate_limit is null
               and not exists (select 1 from pgqueue.partitions p where p.queue = p_queue);
    v_capped := p_control.partition_concurrency is not null
                or not v_plain and exists (select 1 from pgqueue.partitions p
                                           where p.queue = p_queue and p.concurrency is not null);
    -- Revision 0016: limits without fair shares are served in due order (see the head of this file).
    v_fifo := not p_control.partition_fair
              and (v_plain or not exists (select 1 from pgqueue.partitions p
                                          where p.queue = p_queue and coalesce(p.weight, 1) <> 1));
    if v_fifo then
        v_window := p_take + 100;
        v_rated := p_control.partition_rate_limit is not null
                   or not v_plain and exists (select 1 from pgqueue.partitions p
                                              where p.queue = p_queue and p.rate_limit is not null);
        with waiting as materialized (
            -- the oldest ready jobs of the priority, in the order a plain queue reserves them, locked
            -- as they are read (FOR UPDATE SKIP LOCKED, as a plain queue's reservation does: one pass);
            -- those its partition's limits leave out stay locked by this transaction until it ends
            -- (the queue's reservations are serialised by its row anyway)
            select j.id, j.partition as part, j.available_at,
                   j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                   or j.retry_until < p_now as doomed,
                   j.token is not null and not j.prefetched as lost
            from pgqueue.jobs j
            where j.queue = p_queue and j.priority = p_priority and j.available_at <= p_ready_by
            order by j.available_at
            limit v_window
            for update skip locked
        ),
        counts as materialized (
            -- the jobs read of each partition (by hash: most partitions' jobs are all allowed)
            select w.part, count(*)::integer as count from waiting w where w.part is not null group by w.part
        ),
        running as materialized (
            -- the queue's running jobs by partition, where some partition has a concurrency limit: one
            -- scan of jobs_partition_running_idx in partition order, joined to the partitions read by
            -- hash below (a probe per partition, or "= any" of their names, cost more: ~550 running
            -- jobs and as many partitions, 0.5 ms against 2-4 ms)
            select j.partition as part, count(*)::integer as running
            from pgqueue.jobs j
            where v_capped and j.queue = p_queue and j.partition is not null and j.token is not null
              and j.available_at > p_now
            group by j.partition
        ),
        allowed as materialized (
            -- what each partition read may get: its limits, as the walk's turns read them
            -- (pgqueue.partition_allowance)
            select p.part, p.count, a.tokens,
                   greatest(0, least(p_take,
                                     case when a.cap is null then p_take else a.cap - coalesce(r.running, 0) end,
                                     coalesce(floor(a.tokens)::integer, p_take))) as allow
            from counts p
            left join pgqueue.partitions o on not v_plain and o.queue = p_queue and o.partition = p.part
            left join running r on r.part = p.part
            cross join lateral (
                select coalesce(o.concurrency, p_control.partition_concurrency) as cap,
                       case when coalesce(o.rate_limit, p_control.partition_rate_limit) is null then null
                            when o.rate_limit is not null then
                                least(coalesce(o.rate_burst, o.rate_limit)::double precision,
                                      coalesce(o.rate_tokens + extract(epoch from p_now - o.rate_refilled_at)::double precision
                                                 * o.rate_limit / extract(epoch from o.rate_period)::double precision,
                                               coalesce(o.rate_burst, o.rate_limit)::double precision))
                            else least(coalesce(p_control.partition_rate_burst, p_control.partition_rate_limit)::double precision,
                                       coalesce(o.rate_tokens + extract(epoch from p_now - o.rate_refilled_at)::double precision
                                                  * p_control.partition_rate_limit
                                                  / extract(epoch from p_control.partition_rate_period)::double precision,
                                                coalesce(p_control.partition_rate_burst,
                                                         p_control.partition_rate_limit)::double precision))
                       end as tokens
            ) a
        ),
        chosen as materialized (
            -- in due order, each partition's first jobs up to what it may get (all of them where it
            -- may get that many; else the first, ranked); jobs without a partition are under no
            -- per-partition limit
            select c.* from (
                select w.id, w.part, w.available_at, w.doomed, w.lost
                from waiting w
                left join allowed a on a.part = w.part
                where w.part is null or a.count <= a.allow
                union all
                select x.id, x.part, x.available_at, x.doomed, x.lost from (
                    select w.*, a.allow, row_number() over (partition by w.part order by w.available_at, w.id) as k
                    from waiting w
                    join allowed a on a.part = w.part and a.count > a.allow
                ) x
                where x.k <= x.allow
            ) c
            order by c.available_at, c.id
            limit p_take
        ),
        picked as materialized (
            select array_agg(c.id order by c.available_at, c.id) as ids, coalesce(bool_or(c.doomed), false) as doomed,
                   coalesce(bool_or(c.lost), false) as lost, count(*)::integer as count
            from chosen c
        ),
        full_read as materialized (
            -- the walk takes what is left only if the read was full (else it saw every candidate)
            select count(*) = v_window as full from waiting
        ),
        given as materialized (
            -- per partition given jobs: its name, its bucket before (null: no rate) and the count, in
            -- one aggregate (so the three arrays are aligned, unsorted); only where a bucket is spent
            -- or the walk goes on (it subtracts them)
            select array_agg(g.part) as names, array_agg(a.tokens) as tokens, array_agg(g.count) as counts
            from (select c.part, count(*)::integer as count from chosen c where c.part is not null group by c.part) g
            join allowed a on a.part = g.part
            where v_rated or (select f.full from full_read f) and (select k.count from picked k) < p_take
        )
        select k.ids, k.doomed, k.lost, k.count, g.names, g.tokens, g.counts, f.full
        from picked k, given g, full_read f
        into v_got, v_got_doomed, v_got_lost, v_count, v_names, v_tokens, v_given, v_window_full;
        ids := coalesce(v_got, '{}');
        doomed := v_got_doomed;
        lost := v_got_lost;
        v_left := p_take - v_count;
        v_names := coalesce(v_names, '{}');
        v_tokens := coalesce(v_tokens, '{}');
        v_given := coalesce(v_given, '{}');
        if v_plain then
            -- no partition has a limit: nothing to spend or to subtract in the walk
            v_names := '{}';
            v_tokens := '{}';
            v_given := '{}';
        end if;
    end if;
    -- The round robin walk: fair shares, or what due order left (its read full, the call not).
    if v_left > 0 and v_window_full then
    loop
        if v_credit > 0 then
            -- The turn of the partition served last goes on (v_part is that partition).
            v_walk := array[v_part];
            v_first_ids := array[null::uuid];
            v_quantum := v_credit;
            v_credit := 0;
        else
            v_quantum := null;
            -- issue 28: the next k partitions after v_part with jobs of this priority: k turns of r
            -- jobs (times their weights) fitting in what is left. Revision 0011: the next 2k entries
            -- of jobs_partition_idx (at most 128) are read first in one ordered scan, and only past
            -- them one index probe per partition. A probe bounded only below (partition > x) reads
            -- the rest of its index page (PostgreSQL 15 checks every entry a page holds past the
            -- start), about 20 us; an entry of the scan costs about 2-3 us: with two jobs a
            -- partition, 50 partitions cost 0.2 ms instead of 1.2. The cap bounds what the scan
            -- costs where partitions hold many jobs each (it then finds few of them): 0.3 ms.
            v_want := greatest(1, v_left / v_round);
            v_dense := least(2 * v_want, 128);
            -- Revision 0013: the walk reads each partition's first job's id too (from the row of the
            -- index entry it stops at), so that a turn of one job locks that job by its primary key
            -- (below) instead of probing the partition's range again.
            select array_agg(w.part order by w.part), array_agg(w.id order by w.part)
            into v_walk, v_first_ids from (
                with recursive dense as materialized (
                    select j.partition as part, j.available_at, j.ctid as tid, j.id from pgqueue.jobs j
                    where j.queue = p_queue and j.priority = p_priority and j.partition > v_part
                    order by j.partition, j.available_at
                    limit v_dense
                ),
                near as materialized (
                    -- each partition's first entry (the index orders equal due times by tuple id)
                    select distinct on (d.part) d.part, d.id from dense d
                    order by d.part, d.available_at, d.tid
                    limit v_want
                ),
                walk(n, part, id) as (
                    -- the dense scan stopped at its limit short of k partitions: probes after its last
                    select (select count(*) from near)::integer, (select max(n.part) from near n), null::uuid
                    where (select count(*) from dense) = v_dense and (select count(*) from near) < v_want
                    union all
                    select w.n + 1, f.partition, f.id
                    from walk w
                    cross join lateral (select j.partition, j.id from pgqueue.jobs j
                                        where j.queue = p_queue and j.priority = p_priority and j.partition > w.part
                                        order by j.partition, j.available_at
                                        limit 1) f
                    where w.n < v_want
                )
                select n.part, n.id from near n
                union all
                select walk.part, walk.id from walk where walk.n > (select count(*) from near)
            ) w
            where w.part is not null;
            if v_walk is null then
                -- Past the last: the next round starts at the first, unless a whole round gave nothing.
                exit when v_whole_round and v_round_granted = 0;
                -- The next round shares what is left among the partitions whose whole turn was
                -- taken (they may want more), in proportion to their weights. (Only after a whole
                -- round: the partitions before the cursor had no turn yet.)
                if v_whole_round and v_full_weight > 0 then
                    v_round := greatest(1, v_left / v_full_weight);
                end if;
                v_whole_round := true;
                v_full_weight := 0;
                v_round_granted := 0;
                v_part := '';
                continue;
            end if;
            if v_part = '' and cardinality(v_walk) < v_want then
                -- issue 28: a round from the first partition that walked them all: what is left is
                -- shared among them at once (one turn each instead of a round of 1 and another).
                v_round := greatest(v_round, v_left / cardinality(v_walk));
            end if;
        end if;
        -- issue 28: the walk's turns in one statement, in walk order. Per partition: its weight and
        -- what it may still get (its limits as pgqueue.partition_allowance reads them, less what
        -- this call gave it; fair shares alone: anything), so its turn is
        -- want = least(allowance, weight x r), cut to what is left after the turns before it; then
        -- its jobs are locked, oldest due first. The partition is bounded from both sides, not
        -- matched by =, and the jobs ordered by (partition, available_at): an order only
        -- jobs_partition_idx gives without a sort, so the plan keeps that index whatever the
        -- statistics say (with "partition = <each>" the order by partition is redundant, and after
        -- one tenant's backlog, statistics saying every job has one partition, the planner scanned
        -- the queue's order, jobs_reservation_idx, past that backlog for every partition). The
        -- column's collation is deterministic (the database default), so >= and <= is =.
        with running as materialized (
            -- revision 0013: the running jobs of the walk's partitions counted in one range scan of
            -- jobs_partition_running_idx (from the walk's first partition to its last), not one
            -- probe per partition; only where some partition has a concurrency limit.
            select j.partition as part, count(*)::integer as running
            from pgqueue.jobs j
            where v_capped and j.queue = p_queue and j.partition is not null
              and j.partition >= v_walk[1] and j.partition <= v_walk[cardinality(v_walk)]
              and j.token is not null and j.available_at > p_now
            group by j.partition
        ),
        turn as materialized (
            select u.n, u.part, u.first, coalesce(o.weight, 1) as weight, a.tokens,
                   greatest(0, least(p_take,
                                     case when a.cap is null then p_take
                                          else a.cap - coalesce(r.running, 0) end,
                                     coalesce(floor(a.tokens)::integer, p_take))
                                - coalesce(g.given, 0)) as allow
            from unnest(v_walk, v_first_ids) with ordinality as u(part, first, n)
            left join pgqueue.partitions o on not v_plain and o.queue = p_queue and o.partition = u.part
            left join unnest(v_names, v_given) as g(name, given) on g.name = u.part
            left join running r on r.part = u.part
            cross join lateral (
                select coalesce(o.concurrency, p_control.partition_concurrency) as cap,
                       case when coalesce(o.rate_limit, p_control.partition_rate_limit) is null then null
                            when o.rate_limit is not null then
                                least(coalesce(o.rate_burst, o.rate_limit)::double precision,
                                      coalesce(o.rate_tokens + extract(epoch from p_now - o.rate_refilled_at)::double precision
                                                 * o.rate_limit / extract(epoch from o.rate_period)::double precision,
                                               coalesce(o.rate_burst, o.rate_limit)::double precision))
                            else least(coalesce(p_control.partition_rate_burst, p_control.partition_rate_limit)::double precision,
                                       coalesce(o.rate_tokens + extract(epoch from p_now - o.rate_refilled_at)::double precision
                                                  * p_control.partition_rate_limit
                                                  / extract(epoch from p_control.partition_rate_period)::double precision,
                                                coalesce(p_control.partition_rate_burst,
                                                         p_control.partition_rate_limit)::double precision))
                       end as tokens
            ) a
        ),
        planned as materialized (
            select t.*, coalesce(v_quantum, t.weight * v_round) as quantum,
                   greatest(0, least(t.allow, coalesce(v_quantum, t.weight * v_round),
                                     v_left - coalesce(sum(least(t.allow, coalesce(v_quantum, t.weight * v_round)))
                                                       over (order by t.n rows between unbounded preceding and 1 preceding),
                                                       0))) as lim
            from turn t
        ),
        -- One row per job locked (an aggregate per partition would cost more than its scan).
        -- Revision 0013: a turn of one job first locks its partition's first job, the one the walk
        -- read, by its primary key, if it is still a candidate (ready, not locked by another
        -- transaction, not taken earlier in this call); every other turn, and one whose first job
        -- was not locked so, probes its partition as before. (1,000 partitions capped at 2: a
        -- reservation of 450 takes 450 turns of one job.)
        locked as materialized (
            select p.n, c.id, c.available_at, c.doomed, c.lost
            from planned p
            left join lateral (
                select j.id, j.available_at,
                       j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                       or j.retry_until < p_now as doomed,
                       j.token is not null and not j.prefetched as lost
                from pgqueue.jobs j
                -- Still in this queue, priority and partition (a debounced job's may change): compared
                -- as a row with "is not distinct from", which no index serves, so that the planner
                -- reaches the job by its primary key whatever the statistics say.
                where p.lim = 1 and j.id = p.first
                  and (j.queue, j.priority, j.partition) is not distinct from (p_queue, p_priority, p.part)
                  and j.available_at <= p_ready_by and j.id <> all (ids)
                for update skip locked
            ) f on true
            cross join lateral (
                select f.id, f.available_at, f.doomed, f.lost
                where f.id is not null
                union all
                select x.id, x.available_at, x.doomed, x.lost from (
                    -- Rows this transaction locked already are not skipped by SKIP LOCKED: left out by id.
                    select j.id, j.available_at,
                           j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                           or j.retry_until < p_now as doomed,
                           j.token is not null and not j.prefetched as lost
                    from pgqueue.jobs j
                    where j.queue = p_queue and j.priority = p_priority
                      and j.partition >= p.part and j.partition <= p.part
                      and j.available_at <= p_ready_by and j.id <> all (ids)
                    order by j.partition, j.available_at
                    limit p.lim - (f.id is not null)::integer
                    for update skip locked
                ) x
            ) c
        ),
        -- Per partition of the walk: how many jobs it was given (revision 0013: what the call reads
        -- below comes from one pass over these and one over the locked rows, not a scan per figure).
        given as materialized (
            select p.n, p.part, p.weight, p.tokens, p.allow, p.quantum, p.lim, coalesce(g.count, 0) as count
            from planned p
            left join (select l.n, count(*)::integer as count from locked l group by l.n) g on g.n = p.n
        ),
        picked as (
            select array_agg(l.id order by l.n, l.available_at) as ids, coalesce(bool_or(l.doomed), false) as doomed,
                   coalesce(bool_or(l.lost), false) as lost, count(*)::integer as count
            from locked l
        ),
        -- the turn cut short by what was left (the turns after it were not taken)
        cut as (
            select g.n, g.part, g.count, g.lim, g.allow, g.quantum from given g
            where g.lim < least(g.allow, g.quantum) order by g.n limit 1
        )
        select (select k.ids from picked k), (select k.doomed from picked k), (select k.lost from picked k),
               (select k.count from picked k),
               array_agg(g.part order by g.n) filter (where g.count > 0),
               array_agg(g.tokens order by g.n) filter (where g.count > 0),
               array_agg(g.count order by g.n) filter (where g.count > 0),
               (array_agg(g.part order by g.n desc) filter (where g.count > 0))[1],
               -- whole turns taken with room left: the next round shares what is left among them
               coalesce(sum(g.weight) filter (where g.count = g.quantum and (v_plain or g.allow > g.count)), 0)::integer,
               -- the cut turn, and the rest of it if it got all it was cut to and has room left
               (select c.part from cut c),
               coalesce((select case when c.count = c.lim and (v_plain or c.allow > c.count) then c.quantum - c.lim
                                     else 0 end from cut c), 0)
        into v_got, v_got_doomed, v_got_lost, v_count, v_w_names, v_w_tokens, v_w_got, v_w_last, v_w_full, v_cut, v_cut_rest
        from given g;
        if v_count > 0 then
            ids := ids || v_got;
            doomed := doomed or v_got_doomed;
            lost := lost or v_got_lost;
            v_left := v_left - v_count;
            v_round_granted := v_round_granted + v_count;
            v_full_weight := v_full_weight + v_w_full;
            v_last := v_w_last;
            v_credit_left := case when v_cut = v_w_last then v_cut_rest else 0 end;
            if v_plain then
                null;
            elsif v_names = '{}' then
                -- revision 0013: the call's first walk with jobs (most calls have one): nothing to merge
                v_names := v_w_names;
                v_tokens := v_w_tokens;
                v_given := v_w_got;
            else
                select array_agg(coalesce(a.name, b.name)), array_agg(coalesce(a.tokens, b.tokens)),
                       array_agg(coalesce(a.given, 0) + coalesce(b.given, 0))
                into v_names, v_tokens, v_given
                from unnest(v_names, v_tokens, v_given) as a(name, tokens, given)
                full join unnest(v_w_names, v_w_tokens, v_w_got) as b(name, tokens, given) on a.name = b.name;
            end if;
        end if;
        exit when v_left <= 0;
        if v_cut is not null then
            -- The turns after the cut one were not taken: the walk goes on from it (with the rest
            -- of its turn first, if it has one).
            v_part := v_cut;
            v_credit := v_cut_rest;
        else
            v_part := v_walk[cardinality(v_walk)];
        end if;
    end loop;
    end if;

    -- Spend the tokens of the partitions under a rate that got jobs.
    if array_remove(v_tokens, null) <> '{}' then
        insert into pgqueue.partitions as p (queue, partition, rate_tokens, rate_refilled_at)
        select p_queue, u.name, u.tokens - u.given, p_now
        from unnest(v_names, v_tokens, v_given) as u(name, tokens, given)
        where u.tokens is not null and u.given > 0
        on conflict (queue, partition) do update
            set rate_tokens = excluded.rate_tokens, rate_refilled_at = excluded.rate_refilled_at;
    end if;
    cursor_at := p_control.partition_cursor;
    credit := p_control.partition_credit;
    if v_last <> '' and (v_last is distinct from p_control.partition_cursor
                         or v_credit_left <> p_control.partition_credit) then
        update pgqueue.queues q set partition_cursor = v_last, partition_credit = v_credit_left
        where q.name = p_queue;
        cursor_at := v_last;
        credit := v_credit_left;
    end if;

    if v_left > 0 and not v_fifo then
        select array_agg(o.id) into v_got from (
            select j.id, j.partition from pgqueue.jobs j
            where j.queue = p_queue and j.priority = p_priority and j.available_at <= p_ready_by
            order by j.available_at
            limit v_left + 100
        ) o
        where o.partition is null;
        if v_got is not null then
            -- Found again by primary key and locked (those another transaction holds are left).
            select array_agg(c.id order by c.available_at), coalesce(bool_or(c.doomed), false),
                   coalesce(bool_or(c.lost), false)
            into v_got, v_got_doomed, v_got_lost from (
                select j.id, j.available_at,
                       j.attempts - (j.prefetched and j.token is not null)::integer >= j.max_tries
                       or j.retry_until < p_now as doomed,
                       j.token is not null and not j.prefetched as lost
                from pgqueue.jobs j
                where j.id = any (v_got) and j.available_at <= p_ready_by
                order by j.available_at
                limit v_left
                for update skip locked
            ) c;
            ids := ids || coalesce(v_got, '{}');
            doomed := doomed or coalesce(v_got_doomed, false);
            lost := lost or coalesce(v_got_lost, false);
        end if;
    end if;
end
$$;

comment on function pgqueue.reserve_partitions(pgqueue.queues, smallint, integer, timestamptz, timestamptz) is
    'pgqueue: the candidates of one priority of a queue served by partition (limits, weighted round robin), locked.';
