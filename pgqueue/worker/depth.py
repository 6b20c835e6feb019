"""The queue depth sampler of a worker with metrics: ONE worker of a database counts the queues.

Counting ``pgqueue.jobs`` (the ``pgqueue.queue_stats`` view) costs a scan of the table, so it must
not run per scrape, nor per worker. Every worker with metrics runs a :class:`DepthSampler`; the one
that holds the session advisory lock :data:`DEPTH_LOCK_KEY` (on its own direct connection) counts
once per ``interval`` and exports the result; the others export no depth, and try the lock again
each interval, so another takes over within one interval when the sampling worker stops or dies
(its connection closes and PostgreSQL frees the lock). Dashboards take ``max by (queue)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg

from pgqueue.store import partition_depths_on, queue_paused_on, queue_stats_on, try_vacuum_lock
from pgqueue.store.errors import is_transient
from pgqueue.worker.instruments import DEPTH_STATES, OTHER, Recorder

logger = logging.getLogger("pgqueue.worker")

#: The session advisory lock held by the worker that samples queue depths: ``0x7067717565756502``
#: ("pgqueue" and 2).
DEPTH_LOCK_KEY = 0x7067717565756502


class DepthSampler:
    """Samples queue depths into ``recorder`` every ``interval`` seconds while it holds the lock."""

    def __init__(self, dsn: str, recorder: Recorder, *, interval: float) -> None:
        self._dsn = dsn
        self._recorder = recorder
        self.interval = interval
        #: Whether this worker holds the lock (it is the one sampling).
        self.sampling = False
        #: Samples taken by this worker.
        self.samples = 0

    async def run(self) -> None:
        """Sample until cancelled; errors are logged and the next interval tries again."""
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            while True:
                try:
                    if conn is None or conn.closed:
                        self.sampling = False
                        conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, connect_timeout=10)
                    if not self.sampling:
                        self.sampling = await try_vacuum_lock(conn, DEPTH_LOCK_KEY)
                    if self.sampling:
                        await self.sample(conn)
                except Exception as exc:
                    if is_transient(exc):
                        self._recorder.transient_error()
                    logger.warning("pgqueue: sampling queue depths failed (%s: %s); trying again in %gs",
                                   type(exc).__name__, exc, self.interval)
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            await conn.close()
                    conn = None
                    self.sampling = False
                await asyncio.sleep(self.interval)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def sample(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Count the queues once (on ``conn``) and keep the result: the first ``max_queues`` queues
        by name each on their own, the rest summed under :data:`~pgqueue.worker.instruments.OTHER`
        (the oldest ready age: the greatest), so a database with any number of queues exports at
        most ``max_queues + 1``. Each queue also says whether it is paused (``pgqueue.queues``; 1 or
        0, under OTHER how many are) and its current concurrency limit (adaptive queues move it; under
        OTHER the sum; absent: no limit): a controlled queue without jobs is sampled too."""
        controls = await queue_paused_on(conn)
        queues = {row.queue: {"ready": row.ready, "delayed": row.delayed, "blocked": row.blocked,
                              "reserved": row.reserved,
                              "expired": row.expired, "failed": row.failed,
                              "oldest_ready_age": row.oldest_ready_age or 0.0}
                  for row in await queue_stats_on(conn)}
        for queue in controls:
            queues.setdefault(queue, {**dict.fromkeys(DEPTH_STATES, 0.0), "oldest_ready_age": 0.0})
        cap = self._recorder.max_queues
        depth: dict[str, dict[str, float]] = {}
        rest: dict[str, float] | None = None
        for queue in sorted(queues):
            values = queues[queue]
            paused, limit = controls.get(queue, (False, None))
            values["paused"] = 1.0 if paused else 0.0
            if limit is not None:
                values["concurrency_limit"] = float(limit)
            if len(depth) < cap and queue != OTHER:
                depth[queue] = values
            elif rest is None:
                rest = values
            else:
                for state in (*DEPTH_STATES, "paused"):
                    rest[state] += values[state]
                if limit is not None:
                    rest["concurrency_limit"] = rest.get("concurrency_limit", 0.0) + limit
                rest["oldest_ready_age"] = max(rest["oldest_ready_age"], values["oldest_ready_age"])
        if rest is not None:
            depth[OTHER] = rest
        self._recorder.sampled(depth, await self.sample_partitions(conn, depth))
        self.samples += 1

    async def sample_partitions(self, conn: psycopg.AsyncConnection[Any], depth: dict[str, dict[str, float]]
                                ) -> dict[str, dict[str, dict[str, float]]]:
        """Per queue with partitioned jobs, its ``max_partitions`` busiest partitions (jobs running and
        waiting, and the concurrency limit, issue 28) and the rest summed under OTHER, counted by the
        database (``pgqueue.partition_depths``): 10,000 tenants make at most ``max_partitions + 1`` label
        values per queue. A queue past the queue cap (not in ``depth``) is summed under OTHER, OTHER."""
        found: dict[str, dict[str, dict[str, float]]] = {}
        for row in await partition_depths_on(conn, self._recorder.max_partitions):
            queue = row.queue if row.queue in depth and row.queue != OTHER else OTHER
            partition = row.partition if row.partition is not None and queue != OTHER else OTHER
            values = found.setdefault(queue, {}).setdefault(partition, {"running": 0.0, "waiting": 0.0})
            values["running"] += row.running
            values["waiting"] += row.waiting
            if row.concurrency is not None:
                values["concurrency_limit"] = values.get("concurrency_limit", 0.0) + row.concurrency
        return found
