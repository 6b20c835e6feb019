"""Control and status: what operators do to queues (clear, cancel, pause, resume, limits) and
read about them (counts, controls, listening workers, whether the schema is there)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from pgqueue.errors import QueueStorageError
from pgqueue.resources import query
from pgqueue.store.errors import NOT_MIGRATED, storage_errors
from pgqueue.store.pooled import Pooled


@dataclass(frozen=True)
class QueueStats:
    """Counts of one queue, as the ``pgqueue.queue_stats`` view has them, except that ``blocked``
    (waiting for parents or a batch, issue 26) is counted apart from ``delayed``."""

    queue: str
    ready: int
    delayed: int
    reserved: int
    expired: int
    failed: int
    oldest_ready_age: float | None
    blocked: int = 0


#: What ``pgqueue.cancel`` did: removed a waiting job, removed a reserved one (its worker is
#: told to stop the handler), or nothing, because the job was already cancelled, already
#: failed, or is unknown (never dispatched, or finished: acked jobs leave no row).
CancelOutcome = Literal["cancelled", "cancelled_running", "already_cancelled", "already_failed", "not_found"]


@dataclass(frozen=True, slots=True)
class QueueControl:
    """What an operator set on a queue (a row of ``pgqueue.queues``).

    ``concurrency``: at most this many jobs of the queue reserved at once, across all workers;
    ``rate_limit`` per ``rate_period`` seconds: at most that many reservations. None: no limit.
    ``burst``: the rate's token bucket capacity, the most reservations granted at once; None:
    the default, ``rate_limit`` (the rate per period). ``adaptive_min``, ``adaptive_max``: the
    bounds of an adaptive limit (``concurrency`` is then its current value, halved by backpressure
    and grown by acks); None: not adaptive. ``adaptive_decrease``: what a backpressure report
    multiplies the queue's adaptive limits by (its own and its partitions'). ``partition_adaptive_min``,
    ``partition_adaptive_max``: the bounds every partition's concurrency moves in (issue 28; None: not
    adaptive; ``partition_concurrency`` is then where a partition starts).
    ``aging``: priority aging, the seconds a ready job waits
    per priority level it gains (:meth:`pgqueue.Client.set_aging`); None: strict priorities.
    """

    queue: str
    paused: bool
    concurrency: int | None
    rate_limit: int | None
    rate_period: float | None
    burst: int | None = None
    #: Issue 28: the limits every partition of the queue gets (pgqueue.set_partition_limits), None: none;
    #: ``fair``: its partitions are served in turn (else limits alone keep the queue's due order).
    partition_concurrency: int | None = None
    partition_rate_limit: int | None = None
    partition_rate_period: float | None = None
    partition_burst: int | None = None
    fair: bool = False
    adaptive_min: int | None = None
    adaptive_max: int | None = None
    adaptive_decrease: float = 0.9
    partition_adaptive_min: int | None = None
    partition_adaptive_max: int | None = None
    aging: float | None = None


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """One partition of a queue (``pgqueue.partition_status``, issue 28): its jobs running (reserved,
    lease live), waiting (ready now) and delayed, and the limits reserve applies to it (its override,
    else the queue's per-partition values; None: none), its fair share weight, whether overridden.
    ``adaptive_min``, ``adaptive_max``: the bounds its concurrency moves in (its own, else the queue's
    for every partition; None: not adaptive), ``concurrency`` being then the current limit."""

    partition: str
    running: int
    waiting: int
    delayed: int
    concurrency: int | None
    rate_limit: int | None
    rate_period: float | None
    weight: int
    overridden: bool
    adaptive_min: int | None = None
    adaptive_max: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionDepth:
    """One row of ``pgqueue.partition_depths`` (the metrics per partition, issue 28): a busy partition
    of a queue (``partition`` None: the queue's other partitions, summed), its jobs running and waiting,
    its concurrency limit (None: none; summed for the rest) and how many partitions the row stands for."""

    queue: str
    partition: str | None
    running: int
    waiting: int
    concurrency: int | None
    partitions: int


async def queue_stats_on(conn: psycopg.AsyncConnection[Any]) -> list[QueueStats]:
    """Per-queue counts from the ``pgqueue.queue_stats`` view, on ``conn`` (the metrics' depth sampler)."""
    cur = await conn.execute(query("queue_stats"))
    return [QueueStats(*row) for row in await cur.fetchall()]


async def partition_depths_on(conn: psycopg.AsyncConnection[Any], top: int) -> list[PartitionDepth]:
    """Per queue its ``top`` busiest partitions and the rest summed (``pgqueue.partition_depths``), on
    ``conn`` (the metrics' depth sampler); nothing before revision 0010."""
    cur = await conn.execute(query("partition_depths"), (top,))
    return [PartitionDepth(*row) for row in await cur.fetchall()]


async def queue_paused_on(conn: psycopg.AsyncConnection[Any]) -> dict[str, tuple[bool, int | None]]:
    """Whether each queue with a row in ``pgqueue.queues`` is paused, and its current concurrency
    limit (None: none), on ``conn`` (the metrics' depth sampler); a queue without a row is neither."""
    cur = await conn.execute(query("queue_paused"))
    return {name: (bool(paused), limit) for name, paused, limit in await cur.fetchall()}


class ControlStatements(Pooled):
    """Queue controls and status, for people: errors are translated."""

    __slots__ = ()

    async def queue_stats(self) -> list[QueueStats]:
        """Per-queue counts from the ``pgqueue.queue_stats`` view, by queue name."""
        with storage_errors("reading queue statistics"):
            async with self._pool.connection() as conn:
                return await queue_stats_on(conn)

    async def clear(self, queue: str) -> int:
        """Remove the ready, delayed and reserved jobs of a queue; returns how many."""
        with storage_errors("clearing a queue"):
            return int(await self._value("clear", (queue,)) or 0)

    async def cancel(self, job_id: uuid.UUID) -> CancelOutcome:
        """Cancel a job into failed_jobs (reason ``cancelled``); see :data:`CancelOutcome`."""
        with storage_errors("cancelling a job"):
            outcome: CancelOutcome = await self._value("cancel", (job_id,))
        return outcome

    async def pause(self, queue: str) -> bool:
        """Stop every worker reserving from ``queue``; False if it was already paused."""
        with storage_errors(f"pausing queue {queue!r}"):
            return bool(await self._value("pause", (queue,)))

    async def resume(self, queue: str) -> bool:
        """Let workers reserve from a paused ``queue`` again; False if it was not paused."""
        with storage_errors(f"resuming queue {queue!r}"):
            return bool(await self._value("resume", (queue,)))

    async def set_limits(self, queue: str, concurrency: int | None, rate_limit: int | None,
                         rate_period: float | None, burst: int | None = None,
                         adaptive: tuple[int, int] | None = None, adaptive_decrease: float | None = None
                         ) -> None:
        """Set (None: clear) the global concurrency and rate limits of ``queue``, the rate's
        burst (None: the rate per period), the bounds of an adaptive limit (None: not adaptive;
        ``concurrency`` is where it starts) and the cut's factor (None: the default), in one transaction."""
        low, high = adaptive if adaptive is not None else (None, None)
        with storage_errors(f"setting the limits of queue {queue!r}"):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(query("set_limits"), (queue, concurrency, rate_limit, rate_period, burst))
                await conn.execute(query("set_adaptive_limit"), (queue, low, high))
                await conn.execute(query("set_adaptive_decrease"), (queue, adaptive_decrease))

    async def set_aging(self, queue: str, seconds: float | None) -> None:
        """Set (None: clear) the priority aging of ``queue`` (issue 28): seconds per level gained."""
        with storage_errors(f"setting the priority aging of queue {queue!r}"):
            await self._run("set_aging", (queue, seconds))

    async def set_partition_limits(self, queue: str, concurrency: int | None, rate_limit: int | None,  # one per column
                                   rate_period: float | None, burst: int | None, fair: bool,
                                   adaptive: tuple[int, int] | None = None) -> None:
        """Set (None: clear) the limits every partition of ``queue`` gets, fair shares and the bounds of
        the partitions' adaptive limits (None: not adaptive; ``concurrency`` is where a partition starts),
        in one transaction (issue 28)."""
        low, high = adaptive if adaptive is not None else (None, None)
        with storage_errors(f"setting the partition limits of queue {queue!r}"):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(query("set_partition_adaptive_limit"), (queue, None, low, high))
                await conn.execute(query("set_partition_limits"),
                                   (queue, concurrency, rate_limit, rate_period, burst, fair))

    async def set_partition_limit(self, queue: str, partition: str, concurrency: int | None,  # one per column
                                  rate_limit: int | None, rate_period: float | None, burst: int | None,
                                  weight: int | None, adaptive: tuple[int, int] | None = None) -> None:
        """Set (all None: remove) one partition's override of ``queue`` and its own adaptive bounds
        (None: none; ``concurrency`` is where it starts), in one transaction (issue 28)."""
        low, high = adaptive if adaptive is not None else (None, None)
        with storage_errors(f"setting the limits of partition {partition!r} of queue {queue!r}"):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(query("set_partition_limit"),
                                   (queue, partition, concurrency, rate_limit, rate_period, burst, weight))
                await conn.execute(query("set_partition_adaptive_limit"), (queue, partition, low, high))

    async def partition_status(self, queue: str, limit: int) -> list[PartitionStatus]:
        """The partitions of ``queue`` (at most ``limit``, busiest first), from ``pgqueue.partition_status``."""
        with storage_errors(f"reading the partitions of queue {queue!r}"):
            return [PartitionStatus(*row) for row in await self._rows("partition_status", (queue, limit))]

    async def queue_controls(self) -> list[QueueControl]:
        """Every queue's controls (paused, limits), by queue name; queues never controlled are absent."""
        with storage_errors("reading the queue controls"):
            return [QueueControl(*row) for row in await self._rows("queue_controls")]

    async def listening_workers(self) -> int:
        """How many other sessions of this database LISTEN on pgqueue's channels (running workers)."""
        with storage_errors("counting listening workers"):
            return int(await self._value("listening_workers") or 0)

    async def schema_present(self) -> bool:
        """Whether the database has pgqueue's schema at a version this library can use."""
        with storage_errors("checking the pgqueue schema"):
            return bool(await self._value("schema_check"))

    async def check_schema(self) -> None:
        """Raise :class:`~pgqueue.QueueStorageError` saying "run pgqueue migrate" if the schema is missing."""
        if not await self.schema_present():
            raise QueueStorageError(NOT_MIGRATED)
