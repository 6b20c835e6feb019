-- pgqueue.backpressure(id, token, delay_seconds) -> 'backpressured' | 'not_yours' | 'past_deadline'
-- issue 28: adaptive limits. A handler reports that its downstream is overloaded (Backpressure,
-- context.backpressure()). In one statement's transaction, fenced by the token ('not_yours' else,
-- nothing changed):
--   the job goes back, due after p_delay_seconds, WITHOUT using up a try (like pgqueue.snooze: the
--   attempt is given back, counted in snoozes and as given_back in pgqueue.job_stats);
--   revision 0010: a job whose PARTITION has an adaptive limit (pgqueue.set_partition_adaptive_limit:
--   its own bounds, or the queue's for every partition, and no fixed override) cuts that partition's
--   limit and not the queue's; any other job of a queue with an adaptive limit
--   (pgqueue.set_adaptive_limit) cuts the queue's. A cut leaves floor(limit x the queue's
--   adaptive_decrease), at least one less, never below the minimum (0009 halved), unless the job was
--   reserved before that limit was last cut (that overload was already answered); the window of
--   successes restarts.
-- A delay that would make the job due after its retry_until deadline leaves the job as it is
-- ('past_deadline': the worker then retries or fails it as for an error); the limit is cut anyway.
-- From psql:  select pgqueue.backpressure('<job id>', <token>, 5);
create or replace function pgqueue.backpressure(p_id uuid, p_token bigint, p_delay_seconds double precision)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    v_job record;
    v_due timestamptz;
    v_control record;
    v_override pgqueue.partitions;
    v_by_partition boolean := false;
begin
    if p_delay_seconds is null or not (p_delay_seconds >= 0 and p_delay_seconds <= 315360000) then
        raise exception 'pgqueue.backpressure: delay must be a finite number of seconds from 0 to 315360000 (10 years), got %',
                        p_delay_seconds
            using errcode = '22023';
    end if;
    v_due := clock_timestamp() + make_interval(secs => p_delay_seconds);
    select j.queue, j.partition, j.envelope->>'name' as name, j.retry_until, j.reserved_at, j.due_at into v_job
    from pgqueue.jobs j where j.id = p_id and j.token = p_token for update;
    if not found then
        return 'not_yours';
    end if;
    if v_job.partition is not null then
        select q.partition_adaptive, q.partition_adaptive_min, q.partition_adaptive_max, q.partition_concurrency,
               q.adaptive_decrease
        into v_control from pgqueue.queues q where q.name = v_job.queue;
        if found and v_control.partition_adaptive then
            select p.* into v_override from pgqueue.partitions p
            where p.queue = v_job.queue and p.partition = v_job.partition;
            -- Adaptive: its own bounds, or the queue's and no fixed override of its concurrency.
            v_by_partition := v_override.adaptive_min is not null
                              or (v_control.partition_adaptive_min is not null
                                  and (v_override.concurrency is null or coalesce(v_override.adaptive_limit, false)));
        end if;
    end if;
    if v_by_partition then
        -- A partition without a row was at the queue's per-partition concurrency (where partitions start).
        insert into pgqueue.partitions as p (queue, partition, concurrency, adaptive_limit, adaptive_cut_at)
        values (v_job.queue, v_job.partition,
                greatest(v_control.partition_adaptive_min,
                         least(coalesce(v_control.partition_concurrency, v_control.partition_adaptive_max) - 1,
                               floor(coalesce(v_control.partition_concurrency, v_control.partition_adaptive_max)
                                     * v_control.adaptive_decrease)::integer)),
                true, clock_timestamp())
        on conflict (queue, partition) do update
            set concurrency = greatest(coalesce(p.adaptive_min, v_control.partition_adaptive_min),
                                       least(coalesce(case when p.adaptive_limit then p.concurrency end,
                                                      v_control.partition_concurrency,
                                                      p.adaptive_max, v_control.partition_adaptive_max) - 1,
                                             floor(coalesce(case when p.adaptive_limit then p.concurrency end,
                                                            v_control.partition_concurrency,
                                                            p.adaptive_max, v_control.partition_adaptive_max)
                                                   * v_control.adaptive_decrease)::integer)),
                adaptive_limit = true, adaptive_acks = 0, adaptive_cut_at = clock_timestamp(), updated_at = now()
            -- Still adaptive (an operator may have changed it meanwhile), and not cut since this job's reservation.
            where (p.adaptive_min is not null
                   or (v_control.partition_adaptive_min is not null and (p.concurrency is null or p.adaptive_limit)))
              and (p.adaptive_cut_at is null or v_job.reserved_at >= p.adaptive_cut_at);
    else
        update pgqueue.queues q
        set concurrency = greatest(q.adaptive_min,
                                   least(coalesce(q.concurrency, q.adaptive_max) - 1,
                                         floor(coalesce(q.concurrency, q.adaptive_max) * q.adaptive_decrease)::integer)),
            adaptive_acks = 0, adaptive_cut_at = clock_timestamp()
        where q.name = v_job.queue and q.adaptive_min is not null
          and (q.adaptive_cut_at is null or v_job.reserved_at >= q.adaptive_cut_at);
    end if;
    if v_job.retry_until is not null and v_due > v_job.retry_until then
        return 'past_deadline';
    end if;
    update pgqueue.jobs j
    set token = null, reserved_at = null, available_at = v_due, prefetched = false,
        attempts = greatest(j.attempts - 1, 0), snoozes = j.snoozes + 1
    where j.id = p_id and j.token = p_token;
    perform pgqueue.record_outcomes('given_back', array[v_job.queue], array[v_job.name], null,
                                    array[extract(epoch from v_job.reserved_at - v_job.due_at)::double precision]);
    perform pg_notify(case when p_delay_seconds = 0 then 'pgqueue' else 'pgqueue_delayed' end, v_job.queue);
    return 'backpressured';
end
$$;

comment on function pgqueue.backpressure(uuid, bigint, double precision) is
    'pgqueue: put a reserved job back after a delay without using up a try, and cut its partition''s or its queue''s adaptive limit (fenced by its token).';
