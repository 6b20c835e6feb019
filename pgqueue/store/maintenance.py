"""Table maintenance: the statistics of ``pgqueue.jobs``, VACUUM under a session advisory lock,
and the pruning of the history, kept completed jobs, schedule ticks and expired unique keys.

These let psycopg errors through: the worker's maintenance decides what a fault means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from pgqueue.resources import query
from pgqueue.store.pooled import Pooled, first


@dataclass(frozen=True, slots=True)
class TableStatistics:
    """One row of ``sql/queries/maintenance_check.sql``: what the statistics say about ``pgqueue.jobs``."""

    dead_tuples: int
    live_tuples: int
    #: Seconds since the last VACUUM or autovacuum of the table; None: never (since the
    #: statistics were reset).
    since_vacuum: float | None
    #: Whether autovacuum runs on the table: on server-wide and not disabled for the table.
    autovacuum_applies: bool
    #: Dead tuples at which autovacuum would vacuum (the table's reloption, else the server's).
    threshold: int
    #: Whether the current role may VACUUM the table (PostgreSQL skips it with a warning otherwise).
    may_vacuum: bool
    role: str


class MaintenanceStatements(Pooled):
    """What a worker's table maintenance reads and prunes."""

    __slots__ = ()

    async def table_statistics(self) -> TableStatistics | None:
        """The statistics of ``pgqueue.jobs`` (None: the table does not exist)."""
        rows = await self._objects("maintenance_check", TableStatistics)
        return rows[0] if rows else None

    async def prune_history(self, stats_retention: float, completed_retention: float | None,
                            batch: int) -> tuple[int, int]:
        """Delete one batch of expired ``job_stats`` rows and ``completed_jobs`` (None: keep them);
        returns how many of each."""
        row = await self._row("prune_history", (stats_retention, completed_retention, batch))
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    async def prune_ticks_and_keys(self, batch: int) -> tuple[int, int]:
        """Delete one batch of schedule ticks before their catch-up window (the latest of each
        kept) and of expired unique keys whose job is gone; returns how many of each."""
        row = await self._row("prune_ticks_and_keys", (batch,))
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    async def prune_partitions(self, batch: int) -> int:
        """Issue 28: delete one batch of ``pgqueue.partitions`` rows without an override whose bucket
        is full again; returns how many."""
        return int(await self._value("prune_partitions", (batch,)) or 0)


# Statements that must run on a dedicated session (a session advisory lock, VACUUM outside a
# transaction) rather than on a pooled connection: they take the connection.
async def try_vacuum_lock(conn: psycopg.AsyncConnection[Any], key: int) -> bool:
    """Take the session advisory lock ``key`` if free (``maintenance_lock``); False if another session has it."""
    cur = await conn.execute(query("maintenance_lock"), (key,))
    return bool(first(await cur.fetchone()))


async def vacuum_jobs(conn: psycopg.AsyncConnection[Any]) -> None:
    """``VACUUM (SKIP_LOCKED) pgqueue.jobs`` on an autocommit connection."""
    await conn.execute(query("maintenance_vacuum"))


async def vacuum_unlock(conn: psycopg.AsyncConnection[Any], key: int) -> None:
    """Release the session advisory lock taken by :func:`try_vacuum_lock`."""
    await conn.execute(query("maintenance_unlock"), (key,))
