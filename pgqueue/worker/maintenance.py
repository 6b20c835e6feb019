"""Table maintenance: a worker vacuums ``pgqueue.jobs`` when autovacuum does not, and prunes the history.

Every job leaves dead tuples behind (its reservation updates an indexed column, its ack
deletes the row), so a busy queue depends on VACUUM to stay small and fast. Autovacuum does
that when it runs; when it is off server-wide, disabled for the table, or lagging behind,
the worker does it itself, deferring to autovacuum whenever autovacuum keeps up.

The history (``pgqueue.job_stats``) and the kept completed jobs (``pgqueue.completed_jobs``)
are pruned after their retention, and the schedule ticks and unique keys no guarantee needs any
more (``pgqueue.prune_ticks_and_keys``), in batches, at most once a minute per worker;
concurrent workers skip each other's rows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import fields

import psycopg
from psycopg import errors as pg_errors

from pgqueue.errors import QueueConfigurationError, QueueStorageError
from pgqueue.store import Store, TableStatistics, try_vacuum_lock, vacuum_jobs, vacuum_unlock
from pgqueue.store.errors import NOT_MIGRATED, is_transient

logger = logging.getLogger("pgqueue.worker")

#: The session advisory lock a worker holds while it vacuums ``pgqueue.jobs``, so only one
#: session of the database vacuums at a time: ``0x7067717565756501`` ("pgqueue" and 1).
VACUUM_LOCK_KEY = 0x7067717565756501

_LOCK_NOT_AVAILABLE = "55P03"  # SKIP_LOCKED: another VACUUM holds the table

#: Rows of each history table deleted per statement, and statements per prune at most: short
#: transactions, and a worker that comes back after a long pause catches up over a few prunes.
PRUNE_BATCH = 5000
PRUNE_BATCHES = 20

#: The default retention of ``pgqueue.job_stats``: 7 days.
HISTORY_RETENTION = 7 * 86400.0


def check_seconds(value: object, what: str, hint: str = "") -> float:
    """Validate a worker option in seconds (a finite number >= 0); returns it as float."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise QueueConfigurationError(f"{what} must be a finite number of seconds >= 0{hint}, got {value!r}")
    return float(value)


class TableHealth(TableStatistics):
    """What the statistics say about ``pgqueue.jobs`` (:class:`~pgqueue.store.TableStatistics`:
    dead and live tuples, seconds since the last (auto)vacuum, whether autovacuum applies and at
    what threshold, whether the role may vacuum), with the worker's rule for vacuuming."""

    __slots__ = ()

    def vacuum_due(self, grace: float) -> bool:
        """Whether the worker should vacuum: at least ``threshold`` dead tuples, and either
        autovacuum does not apply to the table or it is lagging (neither VACUUM nor autovacuum
        ran in the last ``grace`` seconds)."""
        if self.dead_tuples < self.threshold:
            return False
        if not self.autovacuum_applies:
            return True
        return self.since_vacuum is None or self.since_vacuum >= grace


class Maintenance:
    """Checks ``pgqueue.jobs`` every ``interval`` seconds and vacuums it when due.

    The check runs through the worker's store (its pool). A VACUUM runs on a short-lived autocommit
    connection to ``vacuum_dsn`` (a direct connection to PostgreSQL: it holds the session
    advisory lock :data:`VACUUM_LOCK_KEY`, so only one worker of the database vacuums at a
    time; closing the connection releases it whatever happens). Errors are logged and the
    next interval tries again; a role that may not vacuum the table is told once what to do,
    and maintenance stops for the life of the worker. ``vacuumed`` is called after each VACUUM.
    """

    def __init__(self, store: Store, vacuum_dsn: str | None, *, interval: float, grace: float,
                 vacuumed: Callable[[], None] | None = None, history_retention: float = HISTORY_RETENTION,
                 completed_retention: float | None = None, prune_interval: float = 60.0) -> None:
        self._store = store
        #: None: no VACUUM (behind a transaction pooler without a direct connection); pruning only.
        self._dsn = vacuum_dsn
        self.interval = interval
        self.grace = grace
        self._vacuumed = vacuumed
        self.vacuums = 0
        #: How long ``pgqueue.job_stats`` rows are kept (seconds).
        self.history_retention = history_retention
        #: How long ``pgqueue.completed_jobs`` rows are kept (seconds; None: never pruned by this worker).
        self.completed_retention = completed_retention
        self.prune_interval = prune_interval
        self._pruned_at: float | None = None
        #: Rows deleted by :meth:`prune`: (job_stats, completed_jobs).
        self.pruned = (0, 0)
        #: Rows deleted by :meth:`prune_ticks_and_keys`: (schedule_ticks, unique_keys).
        self.pruned_ticks_and_keys = (0, 0)
        #: Set once pruning was refused for lack of privilege: this worker no longer prunes the history.
        self.prune_refused = False
        #: Likewise for the schedule ticks and unique keys.
        self.prune_ticks_and_keys_refused = False
        #: Set once VACUUM was refused for lack of privilege: maintenance has stopped.
        self.refused = False

    async def run(self) -> None:
        """Check every ``interval`` seconds until cancelled (a role refused VACUUM still prunes)."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.tick()
            except Exception as exc:
                if is_transient(exc):
                    logger.warning("pgqueue: table maintenance of pgqueue.jobs failed (%s); trying again in %gs",
                                   exc, self.interval)
                else:
                    logger.error("pgqueue: table maintenance of pgqueue.jobs failed (%s: %s); trying again in %gs",
                                 type(exc).__name__, exc, self.interval, exc_info=exc)

    async def check(self) -> TableHealth:
        """Read the table's statistics and settings."""
        found = await self._store.table_statistics()
        if found is None:
            raise QueueStorageError(f"checking pgqueue.jobs for table maintenance: {NOT_MIGRATED}")
        return TableHealth(**{f.name: getattr(found, f.name) for f in fields(found)})

    async def tick(self) -> bool:
        """One check, and a VACUUM if due; True if this call vacuumed the table.

        Database errors propagate (:meth:`run` logs them); lack of privilege does not.
        Prunes the history first when ``prune_interval`` has passed since the last prune.
        """
        now = time.monotonic()
        if self._pruned_at is None or now - self._pruned_at >= self.prune_interval:
            self._pruned_at = now
            if not self.prune_refused:
                try:
                    await self.prune()
                except pg_errors.InsufficientPrivilege as exc:
                    self.prune_refused = True
                    logger.warning(
                        "pgqueue: this worker's role may not prune pgqueue.job_stats and pgqueue.completed_jobs "
                        "(%s); run sql/roles/least_privilege.sql again after migrating (it grants "
                        "pgqueue.prune_history to pgqueue_worker), or prune them as the owner",
                        exc.diag.message_primary or exc)
            if not self.prune_ticks_and_keys_refused:
                try:
                    await self.prune_ticks_and_keys()
                except pg_errors.InsufficientPrivilege as exc:
                    self.prune_ticks_and_keys_refused = True
                    logger.warning(
                        "pgqueue: this worker's role may not prune pgqueue.schedule_ticks and pgqueue.unique_keys "
                        "(%s); run sql/roles/least_privilege.sql again after migrating (it grants "
                        "pgqueue.prune_ticks_and_keys to pgqueue_worker), or prune them as the owner",
                        exc.diag.message_primary or exc)
        if self.refused or self._dsn is None:
            return False
        health = await self.check()
        if not health.vacuum_due(self.grace):
            return False
        if not health.may_vacuum:
            self._refuse(health.role, "it owns neither the table nor the database, and has no MAINTAIN on it")
            return False
        return await self.vacuum(health)

    async def prune(self) -> tuple[int, int]:
        """Delete expired ``job_stats`` rows and ``completed_jobs`` in batches of :data:`PRUNE_BATCH`
        (at most :data:`PRUNE_BATCHES` of them); returns how many rows of each were deleted."""
        stats = completed = 0
        for _ in range(PRUNE_BATCHES):
            s, c = await self._store.prune_history(self.history_retention, self.completed_retention, PRUNE_BATCH)
            stats, completed = stats + s, completed + c
            if s < PRUNE_BATCH and c < PRUNE_BATCH:
                break
        self.pruned = (self.pruned[0] + stats, self.pruned[1] + completed)
        if stats or completed:
            logger.info("pgqueue: pruned %d rows of pgqueue.job_stats and %d of pgqueue.completed_jobs past their "
                        "retention", stats, completed)
        await self.prune_results()
        return stats, completed

    async def prune_results(self) -> tuple[int, int]:
        """Issue 26: delete expired results and the failed attempts of jobs gone for the history's
        retention, in batches (as :meth:`prune`); returns how many of each were deleted."""
        results = attempts = 0
        for _ in range(PRUNE_BATCHES):
            r, a, links = await self._store.prune_results(self.history_retention, PRUNE_BATCH)
            results, attempts = results + r, attempts + a
            if r < PRUNE_BATCH and a < PRUNE_BATCH and links < PRUNE_BATCH:
                break
        if results or attempts:
            logger.info("pgqueue: pruned %d expired results and %d failed attempts of jobs that are gone",
                        results, attempts)
        for _ in range(PRUNE_BATCHES):  # issue 27: the steps and signals of workflows that are gone
            if await self._store.prune_workflows(PRUNE_BATCH) < PRUNE_BATCH:
                break
        return results, attempts

    async def prune_ticks_and_keys(self) -> tuple[int, int]:
        """Delete the schedule ticks before their schedule's catch-up window (the latest of each
        is kept) and the expired unique keys whose job is gone, in batches of :data:`PRUNE_BATCH`
        (at most :data:`PRUNE_BATCHES` of them); returns how many rows of each were deleted."""
        ticks = keys = 0
        for _ in range(PRUNE_BATCHES):
            t, k = await self._store.prune_ticks_and_keys(PRUNE_BATCH)
            ticks, keys = ticks + t, keys + k
            if t < PRUNE_BATCH and k < PRUNE_BATCH:
                break
        self.pruned_ticks_and_keys = (self.pruned_ticks_and_keys[0] + ticks, self.pruned_ticks_and_keys[1] + keys)
        if ticks or keys:
            logger.info("pgqueue: pruned %d rows of pgqueue.schedule_ticks and %d of pgqueue.unique_keys that no "
                        "guarantee needs any more", ticks, keys)
        for _ in range(PRUNE_BATCHES):  # issue 28: the buckets of partitions that are full again
            if await self._store.prune_partitions(PRUNE_BATCH) < PRUNE_BATCH:
                break
        return ticks, keys

    async def vacuum(self, health: TableHealth) -> bool:
        """VACUUM the table under the advisory lock; False if another session holds the lock
        or the table, or if the VACUUM was refused."""
        # (severity, SQLSTATE, message) of the server's notices; a Diagnostic is only valid
        # inside the handler.
        notices: list[tuple[str | None, str | None, str | None]] = []

        def noted(diag: psycopg.errors.Diagnostic) -> None:
            notices.append((diag.severity_nonlocalized, diag.sqlstate, diag.message_primary))

        if self._dsn is None:
            return False
        conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, connect_timeout=10)
        try:
            if not await try_vacuum_lock(conn, VACUUM_LOCK_KEY):
                logger.debug("pgqueue: another worker is vacuuming pgqueue.jobs")
                return False
            conn.add_notice_handler(noted)
            started = time.monotonic()
            try:
                await vacuum_jobs(conn)
            except pg_errors.InsufficientPrivilege as exc:
                self._refuse(health.role, exc.diag.message_primary or str(exc))
                return False
            took = time.monotonic() - started
            await vacuum_unlock(conn, VACUUM_LOCK_KEY)
        finally:
            await conn.close()
        skipped = False
        for severity, sqlstate, message in notices:
            if sqlstate == _LOCK_NOT_AVAILABLE:
                skipped = True
                logger.info("pgqueue: pgqueue.jobs is being vacuumed by another session; skipped")
            elif severity == "WARNING":
                logger.warning("pgqueue: VACUUM pgqueue.jobs: %s", message)
        if skipped:
            return False
        self.vacuums += 1
        if self._vacuumed is not None:
            self._vacuumed()
        logger.info("pgqueue: vacuumed pgqueue.jobs in %.2fs: %d dead tuples before (threshold %d, %s)",
                    took, health.dead_tuples, health.threshold,
                    "autovacuum lagging" if health.autovacuum_applies else "autovacuum off for the table")
        return True

    def _refuse(self, role: str, why: str) -> None:
        self.refused = True
        logger.warning(
            "pgqueue: table maintenance is off for this worker: role %r may not VACUUM pgqueue.jobs (%s). "
            "Its dead tuples will pile up and the queue slow down unless the table is vacuumed: enable "
            "autovacuum (autovacuum = on, and no autovacuum_enabled = false on the table), run VACUUM "
            "pgqueue.jobs periodically as the owner role, or on PostgreSQL 17+ GRANT MAINTAIN ON pgqueue.jobs "
            "TO %s; or start workers with maintenance_interval=None to silence this", role, why, role)
