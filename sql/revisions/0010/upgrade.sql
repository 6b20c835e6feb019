-- pgqueue revision 0010: what the next features keep in the database (filled in by their changes).
-- Executed by the alembic revision 0010 (migrations/versions/), before its functions.
select 1;

-- issue 28: adaptive limits per partition, and a configurable cut
-- The multiplicative decrease of a queue's adaptive limits (its own and its partitions'): a cut
-- leaves floor(limit x adaptive_decrease), at least one less, never below the minimum. 0.9 by
-- default (revision 0009 halved: 0.5).
alter table pgqueue.queues
    add column adaptive_decrease double precision not null default 0.9,
    -- The bounds every partition's concurrency limit moves in (pgqueue.set_partition_adaptive_limit
    -- with a null partition); partition_concurrency is where a partition without a row starts.
    add column partition_adaptive_min integer,
    add column partition_adaptive_max integer,
    -- Whether any partition of the queue is adaptive (these bounds, or a named partition's own):
    -- what pgqueue.ack probes, with adaptive_min, through queues_adaptive_idx.
    add column partition_adaptive boolean not null default false,
    add constraint queues_adaptive_decrease check (adaptive_decrease > 0 and adaptive_decrease < 1),
    add constraint queues_partition_adaptive check ((partition_adaptive_min is null) = (partition_adaptive_max is null)
        and (partition_adaptive_min is null
             or (partition_adaptive_min >= 1 and partition_adaptive_max >= partition_adaptive_min)));
-- A partition's adaptive state: its own bounds (null: the queue's partition_adaptive_min/max), whether
-- its concurrency is the adaptive limit's current value (not an operator's fixed override), the
-- acks of its window and when backpressure last cut it.
alter table pgqueue.partitions
    add column adaptive_min integer,
    add column adaptive_max integer,
    add column adaptive_limit boolean not null default false,
    add column adaptive_acks integer not null default 0,
    add column adaptive_cut_at timestamptz,
    add constraint partitions_adaptive check ((adaptive_min is null) = (adaptive_max is null)
        and (adaptive_min is null or (adaptive_min >= 1 and adaptive_max >= adaptive_min))
        and (not adaptive_limit or concurrency is not null));
-- What pgqueue.ack probes: empty unless a queue or one of its partitions is adaptive.
drop index pgqueue.queues_adaptive_idx;
create index queues_adaptive_idx on pgqueue.queues (name) where adaptive_min is not null or partition_adaptive;
-- end issue 28
