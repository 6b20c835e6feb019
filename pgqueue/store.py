"""The store: one typed Python door per SQL statement pgqueue runs.

Every statement lives in ``sql/queries`` (most call a stored function of ``sql/functions``);
the store is the only module that reads them with :func:`pgqueue.resources.query`. It
also decides what a database error means (:mod:`pgqueue.storage`): methods used by people
(dispatch, failed jobs, statistics) raise :class:`~pgqueue.QueueError` subclasses naming
what was being done; methods on the worker's hot path (reserve, ack, release, fail,
extend, next due) let psycopg errors through, because the worker decides per SQLSTATE
whether to retry (:func:`pgqueue.storage.is_transient`).

A :class:`Store` works on one connection pool (one database). Dispatching inside the
caller's own transaction needs no store: :meth:`Store.enqueue_on` and friends run on the
connection or session the caller passes (see :mod:`pgqueue.dispatch`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from pgqueue.dispatch import async_driver_connection, sync_driver_connection
from pgqueue.errors import QueueStorageError
from pgqueue.resources import query
from pgqueue.storage import NOT_MIGRATED, storage_errors


@dataclass(slots=True)
class Reservation:
    """One job handed to a worker by ``pgqueue.reserve``: the row as the database granted it.

    ``envelope`` is the stored envelope as JSON text, not yet parsed or validated: a worker
    decodes it with :meth:`pgqueue.Envelope.decode`, one reservation at a time, so an envelope
    that cannot be read fails its own job instead of the fetch of the whole batch.

    ``prefetched``: granted into the worker's prefetch buffer on its final try; the worker
    starts it only after :meth:`Store.mark_started` accepted it, so if the worker dies before,
    the attempt is given back instead of being spent unrun.
    """

    id: uuid.UUID
    token: int
    attempts: int
    tries: int
    lease_seconds_left: float
    queue: str
    envelope: str
    prefetched: bool = False


@dataclass(frozen=True, slots=True)
class UniqueDispatch:
    """What a dispatch with a unique key did: the id of the job holding the key, and whether
    that is an earlier job (``duplicate``: nothing was inserted)."""

    id: uuid.UUID
    duplicate: bool


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """One row of ``pgqueue.schedule_state`` (and ``pgqueue.schedule_sync``): a schedule as
    registered, whether its job template is (``has_template``), the database clock, when the
    schedule took its current form and its latest enqueued tick not after that clock."""

    name: str
    expression: str
    timezone: str
    catch_up: int
    has_template: bool
    now: datetime
    changed_at: datetime
    last_tick: datetime | None


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule's last enqueued tick (None: none yet), with the database clock."""

    name: str
    last_tick: datetime | None
    now: datetime


#: A batch of acks as the completer hands it over: job ids, tokens, and per job the handler's run
#: time and its wait from reservation to handler start (seconds; None when unknown); then whether
#: to keep copies in ``pgqueue.completed_jobs``.
AckBatch = tuple[list[uuid.UUID], list[int], list[float | None], list[float | None], bool]


@dataclass(frozen=True, slots=True)
class JobStatsRow:
    """One minute of one queue and job name in ``pgqueue.job_stats`` (its shards summed).

    ``minute`` is the start of the minute (database clock) the outcomes were recorded in.
    Durations (handler run time) and latencies (from the attempt's due time to its handler's
    start) are in seconds, over the ``duration_count`` / ``latency_count`` outcomes whose worker
    measured them (None: none did).
    """

    minute: datetime
    queue: str
    name: str
    succeeded: int
    failed: int
    retried: int
    cancelled: int
    duration_count: int
    duration_sum: float
    duration_max: float | None
    latency_count: int
    latency_sum: float
    latency_max: float | None
    #: Attempts the worker interrupted (a forced stop) and gave back with their try (revision 0008).
    given_back: int = 0

    @property
    def duration_avg(self) -> float | None:
        """Mean handler run time in seconds (None: none measured)."""
        return self.duration_sum / self.duration_count if self.duration_count else None

    @property
    def latency_avg(self) -> float | None:
        """Mean queue latency in seconds (None: none measured)."""
        return self.latency_sum / self.latency_count if self.latency_count else None

    def to_data(self) -> dict[str, Any]:
        """JSON-ready: the fields, ``minute`` as ISO 8601 text, and the two averages."""
        return {"minute": self.minute.isoformat(), "queue": self.queue, "name": self.name,
                "succeeded": self.succeeded, "failed": self.failed, "retried": self.retried,
                "cancelled": self.cancelled, "duration_count": self.duration_count,
                "duration_sum": self.duration_sum, "duration_max": self.duration_max,
                "duration_avg": self.duration_avg, "latency_count": self.latency_count,
                "latency_sum": self.latency_sum, "latency_max": self.latency_max,
                "latency_avg": self.latency_avg, "given_back": self.given_back}


@dataclass(frozen=True, slots=True)
class ThroughputBucket:
    """Outcomes recorded in ``pgqueue.job_stats`` from ``start`` for ``minutes`` minutes (all its
    queues, or the one asked for)."""

    start: datetime
    minutes: int
    succeeded: int
    failed: int
    retried: int

    @property
    def total(self) -> int:
        """Every outcome of the bucket (succeeded + failed + retried)."""
        return self.succeeded + self.failed + self.retried


@dataclass(frozen=True, slots=True)
class Throughput:
    """Outcomes of one queue over the last ``minutes`` minutes (the current one included)."""

    queue: str
    minutes: int
    succeeded: int
    failed: int
    retried: int
    cancelled: int

    @property
    def per_minute(self) -> float:
        """Jobs finished (succeeded + failed) per minute over the window."""
        return (self.succeeded + self.failed) / self.minutes

    def to_data(self) -> dict[str, Any]:
        """JSON-ready fields, with ``per_minute``."""
        return {"queue": self.queue, "minutes": self.minutes, "succeeded": self.succeeded, "failed": self.failed,
                "retried": self.retried, "cancelled": self.cancelled, "per_minute": self.per_minute}


#: How many times a dispatch with a unique key that runs in a transaction of pgqueue's own (not
#: the caller's) is tried when the database reports a serialization failure: under REPEATABLE
#: READ or SERIALIZABLE a new snapshot shows the holder a refused one could not see.
UNIQUE_ATTEMPTS = 3


def _unique_dispatch(row: Sequence[Any] | None) -> UniqueDispatch:
    if row is None:  # the function always returns one row
        raise QueueStorageError("pgqueue.enqueue_unique returned no row; please report this")
    return UniqueDispatch(id=row[0], duplicate=bool(row[1]))


@dataclass(frozen=True)
class QueueStats:
    """Counts of one queue, from the ``pgqueue.queue_stats`` view."""

    queue: str
    ready: int
    delayed: int
    reserved: int
    expired: int
    failed: int
    oldest_ready_age: float | None


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
    the default, ``rate_limit`` (the rate per period).
    """

    queue: str
    paused: bool
    concurrency: int | None
    rate_limit: int | None
    rate_period: float | None
    burst: int | None = None


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


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue's row of ``sql/queries/dashboard_queues.sql``: counts read from bounded index ranges.

    Each count reads at most ``cap + 1`` rows; a ``*_capped`` flag says the count stopped there,
    so the number is a lower bound ("more than cap"). ``due_capped`` covers ``ready`` and
    ``expired``, ``later_capped`` covers ``delayed`` and ``reserved``.
    """

    queue: str
    ready: int
    delayed: int
    reserved: int
    expired: int
    failed: int
    due_capped: bool
    later_capped: bool
    failed_capped: bool
    oldest_ready_age: float | None


@dataclass(frozen=True, slots=True)
class ScannedPage:
    """A page read by a bounded keyset scan (``dashboard_failed_page``, ``dashboard_jobs_page``).

    ``rows`` are the matching rows (dicts, newest first); ``scanned`` how many rows after the
    cursor were read to find them; ``last`` the keyset position of the last row read (None if
    none was), from which the next page continues when the scan stopped before the page filled.
    """

    rows: list[dict[str, Any]]
    scanned: int
    last: tuple[Any, ...] | None


@dataclass(frozen=True, slots=True)
class Listener:
    """A session listening on pgqueue's channel (a running worker), from ``pg_stat_activity``."""

    pid: int
    user: str | None
    application_name: str
    client_addr: str | None
    client_hostname: str | None
    backend_start: datetime
    connected_seconds: float
    state: str | None
    state_change: datetime | None


def _first(row: Sequence[Any] | None) -> Any:
    return None if row is None else row[0]


class Store:
    """Typed access to pgqueue's tables through one connection pool (autocommit connections)."""

    __slots__ = ("_pool",)

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool this store runs its statements on."""
        return self._pool

    # ------------------------------------------------------------------ dispatch
    async def enqueue(self, envelope: str, delay: float, *, what: str = "dispatching a job") -> None:
        """Store one envelope (JSON text), ready after ``delay`` seconds, in a transaction of its own."""
        with storage_errors(what):
            async with self._pool.connection() as conn:
                await conn.execute(query("enqueue"), (envelope, delay))

    async def enqueue_many(self, envelopes: str, delays: list[float] | None, *,
                           what: str = "dispatching jobs") -> None:
        """Store many envelopes (one JSON array) in one statement; ``delays``: None (all ready) or one per job."""
        with storage_errors(what):
            async with self._pool.connection() as conn:
                await conn.execute(query("enqueue_many"), (envelopes, delays))

    @staticmethod
    async def enqueue_on(conn: Any, envelope: str, delay: float, *, what: str = "dispatching a job") -> None:
        """:meth:`enqueue` on the caller's connection or session, inside its transaction (no commit)."""
        with storage_errors(what):
            await _execute_on(conn, query("enqueue"), (envelope, delay))

    @staticmethod
    async def enqueue_many_on(conn: Any, envelopes: str, delays: list[float] | None, *,
                              what: str = "dispatching jobs") -> None:
        """:meth:`enqueue_many` on the caller's connection or session, inside its transaction."""
        with storage_errors(what):
            await _execute_on(conn, query("enqueue_many"), (envelopes, delays))

    @staticmethod
    def enqueue_on_sync(conn: Any, envelope: str, delay: float, *, what: str = "dispatching a job") -> None:
        """:meth:`enqueue_on` for a synchronous connection or session."""
        with storage_errors(what):
            sync_driver_connection(conn).execute(query("enqueue"), (envelope, delay))

    @staticmethod
    def enqueue_many_on_sync(conn: Any, envelopes: str, delays: list[float] | None, *,
                             what: str = "dispatching jobs") -> None:
        """:meth:`enqueue_many_on` for a synchronous connection or session."""
        with storage_errors(what):
            sync_driver_connection(conn).execute(query("enqueue_many"), (envelopes, delays))

    async def enqueue_unique(self, envelope: str, delay: float, key: str, scope: str, period: float | None, *,
                             what: str = "dispatching a job") -> UniqueDispatch:
        """Store one envelope unless a job holds ``key`` in ``scope``; says which job holds it now.

        The statement is its own transaction, so a serialization failure (a database whose
        default_transaction_isolation is repeatable read or serializable) is retried, at most
        :data:`UNIQUE_ATTEMPTS` times in all.
        """
        with storage_errors(what):
            for attempt in range(1, UNIQUE_ATTEMPTS + 1):
                try:
                    async with self._pool.connection() as conn:
                        cur = await conn.execute(query("enqueue_unique"), (envelope, delay, key, scope, period))
                        return _unique_dispatch(await cur.fetchone())
                except pg_errors.SerializationFailure:
                    if attempt == UNIQUE_ATTEMPTS:
                        raise
        raise AssertionError("unreachable")  # the loop returns or raises

    @staticmethod
    async def enqueue_unique_on(conn: Any, envelope: str, delay: float, key: str, scope: str,
                                period: float | None, *, what: str = "dispatching a job") -> UniqueDispatch:
        """:meth:`enqueue_unique` on the caller's connection or session, inside its transaction."""
        with storage_errors(what):
            driver = await async_driver_connection(conn)
            params = (envelope, delay, key, scope, period)
            if isinstance(driver, psycopg.AsyncConnection):
                row = await (await driver.execute(query("enqueue_unique"), params)).fetchone()
            else:
                row = driver.execute(query("enqueue_unique"), params).fetchone()
        return _unique_dispatch(row)

    async def enqueue_unique_many(self, envelopes: list[str], delays: list[float], keys: list[str | None],
                                  scope: str, period: float | None, *,
                                  what: str = "dispatching jobs") -> list[UniqueDispatch]:
        """:meth:`enqueue_unique` for many envelopes in one transaction; a None key enqueues plainly.

        The transaction is pgqueue's own, so it is run again after a serialization failure, as
        :meth:`enqueue_unique` is.
        """
        with storage_errors(what):
            for attempt in range(1, UNIQUE_ATTEMPTS + 1):
                try:
                    async with self._pool.connection() as conn, conn.transaction():
                        return await Store.enqueue_unique_many_on(conn, envelopes, delays, keys, scope, period,
                                                                  what=what)
                except QueueStorageError as exc:  # the inner call translated it
                    if exc.sqlstate != "40001" or attempt == UNIQUE_ATTEMPTS:
                        raise
        raise AssertionError("unreachable")  # the loop returns or raises

    @staticmethod
    async def enqueue_unique_many_on(conn: Any, envelopes: list[str], delays: list[float],
                                     keys: list[str | None], scope: str, period: float | None, *,
                                     what: str = "dispatching jobs") -> list[UniqueDispatch]:
        """:meth:`enqueue_unique_many` on the caller's connection or session, inside its transaction."""
        results: list[UniqueDispatch] = []
        with storage_errors(what):
            driver = await async_driver_connection(conn)
            for envelope, delay, key in zip(envelopes, delays, keys, strict=True):
                params: tuple[Any, ...]
                if key is None:
                    statement, params = query("enqueue"), (envelope, delay)
                else:
                    statement, params = query("enqueue_unique"), (envelope, delay, key, scope, period)
                if isinstance(driver, psycopg.AsyncConnection):
                    row = await (await driver.execute(statement, params)).fetchone()
                else:
                    row = driver.execute(statement, params).fetchone()
                if key is None:
                    results.append(UniqueDispatch(id=_first(row), duplicate=False))
                else:
                    results.append(_unique_dispatch(row))
        return results

    async def schedule_sync(self, names: list[str], expressions: list[str], timezones: list[str],
                            catch_ups: list[int], periods: list[int], templates: list[str]) -> list[ScheduleState]:
        """Register schedules with their periods and job templates (JSON text); the state of each.

        Lets psycopg errors through (the scheduler tells a role that may not register from the
        rest); :meth:`register_schedules` is the same for people.
        """
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("schedule_sync"),
                                     (names, expressions, timezones, catch_ups, periods, templates))
            rows = await cur.fetchall()
        return [ScheduleState(*row) for row in rows]

    async def register_schedules(self, names: list[str], expressions: list[str], timezones: list[str],
                                 catch_ups: list[int], periods: list[int], templates: list[str]
                                 ) -> list[ScheduleState]:
        """:meth:`schedule_sync`, raising :class:`~pgqueue.QueueError` subclasses."""
        with storage_errors("registering schedules"):
            return await self.schedule_sync(names, expressions, timezones, catch_ups, periods, templates)

    async def schedule_state(self, names: list[str]) -> list[ScheduleState]:
        """The registered schedules among ``names``, as :meth:`schedule_sync` returns them; marks them seen."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("schedule_state"), (names,))
            rows = await cur.fetchall()
        return [ScheduleState(*row) for row in rows]

    async def enqueue_tick(self, schedule: str, tick: datetime) -> uuid.UUID | None:
        """Enqueue the job of one tick (built by the database from the registered template),
        exactly once; None when the tick was enqueued before."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("enqueue_tick"), (schedule, tick))
            row = await cur.fetchone()
        return None if row is None else row[0]

    async def schedule_ticks(self, names: list[str]) -> list[ScheduleRow]:
        """Per schedule among ``names``: its last enqueued tick, and the database clock."""
        with storage_errors("reading schedules"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("schedule_ticks"), (names,))
                rows = await cur.fetchall()
        return [ScheduleRow(*row) for row in rows]

    async def snooze(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        """Fenced snooze: 'snoozed', 'not_yours' or 'past_deadline'."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("snooze"), (job_id, token, delay))
            return str(_first(await cur.fetchone()))

    # --------------------------------------------------------------- the worker
    # These let psycopg errors through: the worker tells transient faults from the rest.
    async def reserve(self, queues: list[str], limit: int, lease: float, *,
                      run_now: int | None = None, acks: AckBatch | None = None,
                      ) -> tuple[list[Reservation], list[uuid.UUID]]:
        """Reserve up to ``limit`` jobs of ``queues`` (in that order) for ``lease`` seconds.

        The first ``run_now`` (default: all) start at once; the rest are granted as
        ``prefetched`` (see :class:`Reservation`). ``acks`` (an :data:`AckBatch`) are
        acknowledged in the same transaction, in one round trip (pipeline mode) and one commit.
        Returns the reservations and the ids of the acks the fence refused (their lease was
        lost). If the call raises, neither happened; the caller keeps the acks to send again.
        """
        params = (queues, limit, lease, limit if run_now is None else run_now)
        if not acks or not acks[0]:
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("reserve"), params)
                rows = await cur.fetchall()
            return [Reservation(*row) for row in rows], []
        async with self._pool.connection() as conn:
            async with conn.pipeline(), conn.transaction():
                acked = await conn.execute(query("ack"), acks)
                cur = await conn.execute(query("reserve"), params)
            refused = await acked.fetchall()
            rows = await cur.fetchall()
        return [Reservation(*row) for row in rows], [row[0] for row in refused]

    async def ack(self, ids: list[uuid.UUID], tokens: list[int], durations: list[float | None] | None = None,
                  waits: list[float | None] | None = None, keep: bool = False) -> list[uuid.UUID]:
        """Delete finished jobs (fenced by their tokens); returns the ids the fence refused.

        Each counts as succeeded in ``pgqueue.job_stats``, with its handler's run time and its
        wait from reservation to handler start (seconds, None: unknown); ``keep`` copies the
        jobs to ``pgqueue.completed_jobs`` in the same statement.
        """
        unknown: list[float | None] = [None] * len(ids)
        params = (ids, tokens, unknown if durations is None else durations, unknown if waits is None else waits,
                  keep)
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("ack"), params)
            refused = await cur.fetchall()
        return [row[0] for row in refused]

    async def mark_started(self, ids: list[uuid.UUID], tokens: list[int], *, acks: AckBatch | None = None,
                           ) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
        """Clear the marks of prefetched jobs about to start (``pgqueue.mark_started``, fenced);
        ``acks`` ride in the same transaction (one round trip, one commit). Returns the ids
        marked (start those only) and the ids of the acks the fence refused."""
        async with self._pool.connection() as conn:
            if not acks or not acks[0]:
                cur = await conn.execute(query("mark_started"), (ids, tokens))
                marks = await cur.fetchall()
                return [job_id for job_id, marked in marks if marked], []
            async with conn.pipeline(), conn.transaction():
                cur = await conn.execute(query("mark_started"), (ids, tokens))
                acked = await conn.execute(query("ack"), acks)
            marks = await cur.fetchall()
            refused = await acked.fetchall()
        return [job_id for job_id, marked in marks if marked], [row[0] for row in refused]

    async def cancelled(self, ids: list[uuid.UUID], tokens: list[int]) -> list[uuid.UUID]:
        """Of the reservations ``(ids, tokens)``, the ids whose job the database recorded as cancelled
        (``pgqueue.cancelled``: the reservation is gone and the job's latest failure is a cancellation)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("cancelled"), (ids, tokens))
            rows = await cur.fetchall()
        return [job_id for job_id, cancelled in rows if cancelled]

    async def release(self, job_id: uuid.UUID, token: int, delay: float, duration: float | None = None,
                      wait: float | None = None) -> bool:
        """Put a reserved job back, available after ``delay`` seconds; False if the fence refused.

        Counts as retried in ``pgqueue.job_stats`` with the handler's run time and its wait from
        reservation to handler start (seconds, None: unknown).
        """
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("release"), (job_id, token, delay, duration, wait))
            return bool(_first(await cur.fetchone()))

    async def release_interrupted(self, job_id: uuid.UUID, token: int, duration: float | None = None,
                                  wait: float | None = None) -> bool:
        """Put back a job whose attempt the worker interrupted (a forced stop), ready now, with its
        attempt given back; False if the fence refused. Counts as given_back in ``pgqueue.job_stats``
        (run time and wait as for :meth:`release`)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("release_interrupted"), (job_id, token, duration, wait))
            return bool(_first(await cur.fetchone()))

    async def release_unstarted(self, ids: list[uuid.UUID], tokens: list[int]) -> list[uuid.UUID]:
        """Hand back reservations that never ran (the attempt does not count); returns the ids released."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("release_unstarted"), (ids, tokens))
            rows = await cur.fetchall()
        return [job_id for job_id, released in rows if released]

    async def fail(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                   traceback: str | None, reason: str, duration: float | None = None,
                   wait: float | None = None) -> bool:
        """Move a reserved job to failed_jobs (one transaction); False if the fence refused.

        Counts as failed in ``pgqueue.job_stats`` (run time and wait as for :meth:`release`).
        """
        params = (job_id, token, exception, message, traceback, reason, duration, wait)
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("fail"), params)
            return bool(_first(await cur.fetchone()))

    async def extend(self, job_id: uuid.UUID, token: int, seconds: float) -> float | None:
        """Renew a lease to end ``seconds`` from now; the seconds left, or None if the fence refused."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("extend"), (job_id, token, seconds))
            left = _first(await cur.fetchone())
        return None if left is None else float(left)

    async def heartbeat(self, ids: list[uuid.UUID], tokens: list[int], lease: float,
                        ) -> list[tuple[uuid.UUID, bool, float | None]]:
        """Renew the leases of running handlers to end ``lease`` seconds from now, fenced by their
        tokens, in one statement; returns ``(id, renewed, seconds left)`` per job, in the order given."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("heartbeat"), (ids, tokens, lease))
            rows = await cur.fetchall()
        return [(job_id, bool(renewed), None if left is None else float(left)) for job_id, renewed, left in rows]

    async def served_queues(self) -> list[str]:
        """The queues that have jobs or failures (each once), read by index probes, never a table scan."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("served_queues"))
            return [row[0] for row in await cur.fetchall()]

    async def next_due(self, queues: list[str]) -> float | None:
        """Seconds until the next job of ``queues`` is due (<= 0: due now), or None if none is waiting."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("next_due"), (queues,))
            due = _first(await cur.fetchone())
        return None if due is None else float(due)

    async def record_failure(self, envelope: str, attempts: int, exception: str | None, message: str,
                             traceback: str | None, reason: str) -> uuid.UUID:
        """Record a failure of a job that has no row in pgqueue.jobs (the sync driver); returns its id."""
        with storage_errors("recording a failed job"):
            async with self._pool.connection() as conn:
                failure_id = await record_failure_on(conn, envelope, attempts, exception, message, traceback,
                                                     reason)
        return failure_id

    # ------------------------------------------------------------- failed jobs
    async def failed_list(self, queue: str | None, before: datetime | None, limit: int) -> list[dict[str, Any]]:
        """Failure rows (columns of pgqueue.failed_jobs) newest first, older than ``before`` if given."""
        with storage_errors("listing failed jobs"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("failed_list"), {"queue": queue, "before": before, "limit": limit})
                rows: list[dict[str, Any]] = await cur.fetchall()
        return rows

    async def failed_find(self, failure_id: uuid.UUID | str) -> dict[str, Any] | None:
        """The failure row with this id, or None."""
        with storage_errors(f"finding failed job {failure_id}"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("failed_find"), (str(failure_id),))
                row: dict[str, Any] | None = await cur.fetchone()
        return row

    async def failed_count(self, queue: str | None) -> int:
        """How many failures are recorded (of one queue, or all)."""
        with storage_errors("counting failed jobs"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("failed_count"), (queue, queue))
                count = _first(await cur.fetchone())
        return int(count or 0)

    async def forget_failed(self, failure_id: uuid.UUID | str) -> bool:
        """Delete one failure record; False if there was none."""
        with storage_errors(f"forgetting failed job {failure_id}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("forget_failed"), (str(failure_id),))
                return bool(_first(await cur.fetchone()))

    async def flush_failed(self, queue: str | None, older_than: str | None) -> int:
        """Delete failure records (of one queue, or all; ``older_than`` an interval text); returns how many."""
        with storage_errors("flushing failed jobs"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("flush_failed"), (queue, older_than))
                count = _first(await cur.fetchone())
        return int(count or 0)

    async def retry_failed(self, failure_id: uuid.UUID) -> uuid.UUID:
        """Put a failed job back (same id and envelope, attempts reset); returns the job id.

        Raises :class:`~pgqueue.QueueRetryError` for an unknown failure id or a passed deadline.
        """
        with storage_errors(f"retrying failed job {failure_id}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("retry_failed"), (str(failure_id),))
                job_id = _first(await cur.fetchone())
        return uuid.UUID(str(job_id))

    async def retry_failed_all(self, queue: str | None) -> int:
        """Retry every failure (of one queue, or all) still within its deadline; returns how many."""
        with storage_errors("retrying failed jobs"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("retry_failed_all"), (queue,))
                count = _first(await cur.fetchone())
        return int(count or 0)

    # -------------------------------------------------------------- operations
    async def queue_stats(self) -> list[QueueStats]:
        """Per-queue counts from the ``pgqueue.queue_stats`` view, by queue name."""
        with storage_errors("reading queue statistics"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("queue_stats"))
                rows = await cur.fetchall()
        return [QueueStats(*row) for row in rows]

    async def clear(self, queue: str) -> int:
        """Remove the ready, delayed and reserved jobs of a queue; returns how many."""
        with storage_errors("clearing a queue"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("clear"), (queue,))
                count = _first(await cur.fetchone())
        return int(count or 0)

    async def cancel(self, job_id: uuid.UUID) -> CancelOutcome:
        """Cancel a job into failed_jobs (reason ``cancelled``); see :data:`CancelOutcome`."""
        with storage_errors("cancelling a job"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("cancel"), (job_id,))
                outcome: CancelOutcome = _first(await cur.fetchone())
        return outcome

    async def pause(self, queue: str) -> bool:
        """Stop every worker reserving from ``queue``; False if it was already paused."""
        with storage_errors(f"pausing queue {queue!r}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("pause"), (queue,))
                return bool(_first(await cur.fetchone()))

    async def resume(self, queue: str) -> bool:
        """Let workers reserve from a paused ``queue`` again; False if it was not paused."""
        with storage_errors(f"resuming queue {queue!r}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("resume"), (queue,))
                return bool(_first(await cur.fetchone()))

    async def set_limits(self, queue: str, concurrency: int | None, rate_limit: int | None,
                         rate_period: float | None, burst: int | None = None) -> None:
        """Set (None: clear) the global concurrency and rate limits of ``queue`` and the rate's
        burst (None: the rate per period)."""
        with storage_errors(f"setting the limits of queue {queue!r}"):
            async with self._pool.connection() as conn:
                await conn.execute(query("set_limits"), (queue, concurrency, rate_limit, rate_period, burst))

    async def queue_controls(self) -> list[QueueControl]:
        """Every queue's controls (paused, limits), by queue name; queues never controlled are absent."""
        with storage_errors("reading the queue controls"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("queue_controls"))
                rows = await cur.fetchall()
        return [QueueControl(*row) for row in rows]

    async def listening_workers(self) -> int:
        """How many other sessions of this database LISTEN on pgqueue's channels (running workers)."""
        with storage_errors("counting listening workers"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("listening_workers"))
                count = _first(await cur.fetchone())
        return int(count or 0)

    async def schema_present(self) -> bool:
        """Whether the database has pgqueue's schema at a version this library can use."""
        with storage_errors("checking the pgqueue schema"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("schema_check"))
                return bool(_first(await cur.fetchone()))

    async def check_schema(self) -> None:
        """Raise :class:`~pgqueue.QueueStorageError` saying "run pgqueue migrate" if the schema is missing."""
        if not await self.schema_present():
            raise QueueStorageError(NOT_MIGRATED)

    # ------------------------------------------------------------ maintenance
    async def table_statistics(self) -> TableStatistics | None:
        """The statistics of ``pgqueue.jobs`` (None: the table does not exist)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("maintenance_check"))
            row = await cur.fetchone()
        if row is None:
            return None
        dead, live, since, applies, threshold, may_vacuum, role = row
        return TableStatistics(int(dead), int(live), None if since is None else float(since), bool(applies),
                               int(threshold), bool(may_vacuum), str(role))

    async def prune_history(self, stats_retention: float, completed_retention: float | None,
                            batch: int) -> tuple[int, int]:
        """Delete one batch of expired ``job_stats`` rows and ``completed_jobs`` (None: keep them);
        returns how many of each."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("prune_history"), (stats_retention, completed_retention, batch))
            row = await cur.fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    async def prune_ticks_and_keys(self, batch: int) -> tuple[int, int]:
        """Delete one batch of schedule ticks before their catch-up window (the latest of each
        kept) and of expired unique keys whose job is gone; returns how many of each."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("prune_ticks_and_keys"), (batch,))
            row = await cur.fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    # ----------------------------------------------------------------- history
    async def job_stats(self, *, queue: str | None, name: str | None, since: datetime | None,
                        until: datetime | None, limit: int) -> list[JobStatsRow]:
        """``pgqueue.job_stats`` per minute, queue and job name, oldest first (None filters: any)."""
        params = {"queue": queue, "name": name, "since": since, "until": until, "limit": limit}
        with storage_errors("reading the job history"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("job_stats_history"), params)
                rows = await cur.fetchall()
        return [JobStatsRow(r[0], r[1], r[2], int(r[3]), int(r[4]), int(r[5]), int(r[6]), int(r[7]),
                            float(r[8]), None if r[9] is None else float(r[9]), int(r[10]), float(r[11]),
                            None if r[12] is None else float(r[12]), int(r[13])) for r in rows]

    async def throughput(self, windows: list[int]) -> list[Throughput]:
        """Per queue and window (minutes): the outcomes recorded in the last that many minutes."""
        with storage_errors("reading the throughput"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("job_stats_throughput"), {"windows": windows})
                rows = await cur.fetchall()
        return [Throughput(queue=r[1], minutes=int(r[0]), succeeded=int(r[2]), failed=int(r[3]),
                           retried=int(r[4]), cancelled=int(r[5])) for r in rows]

    async def throughput_buckets(self, span: int, bucket: int, queue: str | None) -> list[ThroughputBucket]:
        """The last ``span`` minutes (the current one included) in buckets of ``bucket`` minutes,
        oldest first, empty buckets included; one queue or all (None). ``bucket`` divides ``span``."""
        if bucket < 1 or span < bucket or span % bucket:
            raise ValueError(f"throughput buckets: bucket {bucket!r} must divide span {span!r} minutes")
        with storage_errors("reading the throughput"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("job_stats_buckets"),
                                         {"span": span, "bucket": bucket, "queue": queue})
                rows = await cur.fetchall()
        return [ThroughputBucket(r[0], bucket, int(r[1]), int(r[2]), int(r[3])) for r in rows]

    # -------------------------------------------------------------- dashboard
    # Reads for pgqueue.dashboard: each bounded (capped counts, keyset pages over a bounded scan),
    # so a page costs the same with a million jobs as with ten.
    async def queue_counts(self, cap: int, failed_cap: int) -> list[QueueCounts]:
        """Per-queue counts: jobs read from at most ``cap + 1`` index entries per state and priority,
        failures from at most ``failed_cap + 1`` per queue (see :class:`QueueCounts`)."""
        with storage_errors("reading queue counts"):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(query("dashboard_jit_off"))
                cur = await conn.execute(query("dashboard_queues"), {"cap": cap, "failed_cap": failed_cap})
                rows = await cur.fetchall()
        return [QueueCounts(*row) for row in rows]

    async def queue_sample(self, pages: int) -> tuple[float, dict[str, tuple[int, int, int, int]]]:
        """The job states found on a random sample of about ``pages`` pages of ``pgqueue.jobs``.

        Returns the sampled percentage and, per queue seen, (ready, delayed, reserved, expired)
        in the sample: divide by ``percent / 100`` to estimate the table's counts.
        """
        with storage_errors("sampling queue counts"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("dashboard_queue_sample"), {"pages": pages})
                rows = await cur.fetchall()
        return float(rows[0][0]), {str(r[1]): (int(r[2]), int(r[3]), int(r[4]), int(r[5]))
                                   for r in rows if r[1] is not None}

    async def failed_sample(self, pages: int) -> tuple[float, dict[str, int]]:
        """The failures per queue on a random sample of about ``pages`` pages of ``pgqueue.failed_jobs``:
        the sampled percentage and the counts in the sample (see :meth:`queue_sample`)."""
        with storage_errors("sampling failure counts"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("dashboard_failed_sample"), {"pages": pages})
                rows = await cur.fetchall()
        return float(rows[0][0]), {str(r[1]): int(r[2]) for r in rows if r[1] is not None}

    async def table_estimates(self) -> dict[str, int | None]:
        """The planner's row estimates of ``jobs`` and ``failed_jobs`` (None: never analyzed)."""
        with storage_errors("reading table estimates"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("dashboard_estimates"))
                rows = await cur.fetchall()
        estimates: dict[str, int | None] = {"jobs": None, "failed_jobs": None}
        estimates.update({str(name): None if n is None else int(n) for name, n in rows})
        return estimates

    async def failed_page(self, *, queue: str | None, name: str | None, reason: str | None,
                          since: datetime | None, until: datetime | None,
                          after: tuple[datetime, uuid.UUID] | None, scan: int, limit: int) -> ScannedPage:
        """Failures newest first matching the filters, reading at most ``scan`` after ``after``."""
        params = {"queue": queue, "name": name, "reason": reason, "since": since, "until": until,
                  "after_at": after[0] if after else None, "after_id": str(after[1]) if after else None,
                  "scan": scan, "limit": limit}
        with storage_errors("listing failed jobs"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("dashboard_failed_page"), params)
                rows: list[dict[str, Any]] = await cur.fetchall()
        return _scanned_page(rows, ("last_at", "last_id"))

    async def job_failures(self, job_id: uuid.UUID, limit: int) -> list[dict[str, Any]]:
        """The failure records of one job id, newest first (a retried job keeps its id)."""
        with storage_errors(f"listing the failures of job {job_id}"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("dashboard_job_failures"), {"job_id": str(job_id), "limit": limit})
                rows: list[dict[str, Any]] = await cur.fetchall()
        return rows

    async def jobs_page(self, *, queue: str | None, name: str | None, after: uuid.UUID | None,
                        scan: int, limit: int) -> ScannedPage:
        """Live jobs newest dispatch first matching the filters, reading at most ``scan`` after ``after``."""
        params = {"queue": queue, "name": name, "after_id": None if after is None else str(after),
                  "scan": scan, "limit": limit}
        with storage_errors("listing jobs"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("dashboard_jobs_page"), params)
                rows: list[dict[str, Any]] = await cur.fetchall()
        return _scanned_page(rows, ("last_id",))

    async def job_find(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        """One live job in full (envelope, attempts, state, lease), or None if it is not in ``jobs``."""
        with storage_errors(f"finding job {job_id}"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("dashboard_job"), {"job_id": str(job_id)})
                row: dict[str, Any] | None = await cur.fetchone()
        return row

    async def listeners(self) -> list[Listener]:
        """The sessions listening on pgqueue's channel (running workers), longest connected first."""
        with storage_errors("listing listening workers"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("dashboard_workers"))
                rows = await cur.fetchall()
        return [Listener(*row) for row in rows]

    # --- issue 26: results ---
    async def ack_results(self, ids: list[uuid.UUID], tokens: list[int], durations: list[float | None],
                          waits: list[float | None], keep: bool, results: list[str | None],
                          ttls: list[float]) -> list[uuid.UUID]:
        """:meth:`ack` of jobs whose result is kept: each accepted job's result (JSON text; None:
        pending, see :meth:`store_result`) goes to ``pgqueue.job_results`` for its ttl (seconds) in
        the same fenced statement, and its waiters are notified. Returns the ids the fence refused."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("ack_results"), (ids, tokens, durations, waits, keep, results, ttls))
            refused = await cur.fetchall()
        return [row[0] for row in refused]

    async def release_failed(self, job_id: uuid.UUID, token: int, delay: float, duration: float | None,
                             wait: float | None, error: str) -> bool:
        """:meth:`release` of a failed attempt for a retry, keeping its error (JSON text of an object
        of exception, message, traceback and worker) in ``pgqueue.attempt_failures``."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("release_error"), (job_id, token, delay, duration, wait, error))
            return bool(_first(await cur.fetchone()))

    async def fail_by(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                      traceback: str | None, reason: str, duration: float | None, wait: float | None,
                      worker: str) -> bool:
        """:meth:`fail` naming the worker whose attempt failed (kept with the failure and its attempt)."""
        params = (job_id, token, exception, message, traceback, reason, duration, wait, worker)
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("fail_worker"), params)
            return bool(_first(await cur.fetchone()))

    async def store_result(self, job_id: uuid.UUID, token: int, result: str) -> bool:
        """Write the pending result of a job acked inside its handler's transaction, fenced by the
        attempt's token; False when there is no pending result of that token."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("store_result"), (job_id, token, result))
            return bool(_first(await cur.fetchone()))

    @staticmethod
    async def ack_in_transaction_kept(conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID, token: int,
                                      began: str, ttl: float) -> bool | None:
        """:func:`ack_in_transaction` of a job whose result is kept: the ack leaves its result pending
        (for :meth:`store_result`), kept ``ttl`` seconds."""
        cur = await conn.execute(query("ack_in_transaction_kept"), (began, job_id, token, ttl))
        acked = _first(await cur.fetchone())
        return None if acked is None else bool(acked)

    @staticmethod
    def ack_in_transaction_kept_sync(conn: psycopg.Connection[Any], job_id: uuid.UUID, token: int,
                                     began: str, ttl: float) -> bool | None:
        """:meth:`ack_in_transaction_kept` on a blocking connection."""
        cur = conn.execute(query("ack_in_transaction_kept"), (began, job_id, token, ttl))
        acked = _first(cur.fetchone())
        return None if acked is None else bool(acked)

    async def job_state(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        """``pgqueue.job_state``: one job's state, times, result, failure and failed attempts; None
        when pgqueue knows nothing of the id (never dispatched, or acked keeping nothing)."""
        with storage_errors(f"reading the state of job {job_id}"):
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query("job_state"), (job_id,))
                row: dict[str, Any] | None = await cur.fetchone()
        return row

    @staticmethod
    def job_state_sync(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any] | None:
        """:meth:`job_state` on a blocking connection."""
        cur = conn.cursor(row_factory=dict_row)
        cur.execute(query("job_state"), (job_id,))
        return cur.fetchone()

    @staticmethod
    def listen_ended_sync(conn: psycopg.Connection[Any]) -> None:
        """:meth:`listen_ended` on a blocking connection."""
        conn.execute(query("listen_ended"))

    @staticmethod
    async def listen_ended(conn: psycopg.AsyncConnection[Any]) -> None:
        """LISTEN for ended jobs (channel ``pgqueue_ended``, payload = job id)."""
        await conn.execute(query("listen_ended"))

    async def progress(self, job_id: uuid.UUID, token: int, fraction: float | None, note: str | None) -> bool:
        """Store a running handler's progress report (``pgqueue.progress``, fenced by its token;
        ``note``: JSON text); False if the fence refused."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("progress"), (job_id, token, fraction, note))
            return bool(_first(await cur.fetchone()))

    async def prune_results(self, attempts_retention: float, batch: int) -> tuple[int, int]:
        """Delete at most ``batch`` expired results and ``batch`` failed attempts of jobs gone for
        ``attempts_retention`` seconds; returns how many of each."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query("prune_results"), (attempts_retention, batch))
            row = await cur.fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))


# Statements that must run on a dedicated session (a session advisory lock, VACUUM outside a
# transaction, LISTEN) rather than on a pooled connection: they take the connection.
async def try_vacuum_lock(conn: psycopg.AsyncConnection[Any], key: int) -> bool:
    """Take the session advisory lock ``key`` if free (``maintenance_lock``); False if another session has it."""
    cur = await conn.execute(query("maintenance_lock"), (key,))
    return bool(_first(await cur.fetchone()))


async def queue_stats_on(conn: psycopg.AsyncConnection[Any]) -> list[QueueStats]:
    """Per-queue counts from the ``pgqueue.queue_stats`` view, on ``conn`` (the metrics' depth sampler)."""
    cur = await conn.execute(query("queue_stats"))
    return [QueueStats(*row) for row in await cur.fetchall()]


async def vacuum_jobs(conn: psycopg.AsyncConnection[Any]) -> None:
    """``VACUUM (SKIP_LOCKED) pgqueue.jobs`` on an autocommit connection."""
    await conn.execute(query("maintenance_vacuum"))


async def vacuum_unlock(conn: psycopg.AsyncConnection[Any], key: int) -> None:
    """Release the session advisory lock taken by :func:`try_vacuum_lock`."""
    await conn.execute(query("maintenance_unlock"), (key,))


async def begin_transaction(conn: psycopg.AsyncConnection[Any]) -> str:
    """BEGIN a transaction on ``conn`` (autocommit) and return its id, in one round trip; the caller
    commits or rolls back. The id is for :func:`ack_in_transaction`."""
    cur = await conn.execute(query("transaction_begin"), prepare=False)  # two statements: never prepared
    cur.nextset()
    return str(_first(await cur.fetchone()))


def begin_transaction_sync(conn: psycopg.Connection[Any]) -> str:
    """:func:`begin_transaction` on a blocking connection."""
    cur = conn.execute(query("transaction_begin"), prepare=False)
    cur.nextset()
    return str(_first(cur.fetchone()))


async def ack_in_transaction(conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID, token: int,
                             began: str) -> bool | None:
    """The fenced ack of one job on ``conn``, inside the caller's transaction ``began`` (its id, from
    :func:`begin_transaction`); False if the fence refused, None (nothing acked) if ``conn`` is in
    another transaction by now (the caller must roll it back)."""
    cur = await conn.execute(query("ack_in_transaction"), (began, job_id, token))
    acked = _first(await cur.fetchone())
    return None if acked is None else bool(acked)


def ack_in_transaction_sync(conn: psycopg.Connection[Any], job_id: uuid.UUID, token: int,
                            began: str) -> bool | None:
    """:func:`ack_in_transaction` on a blocking connection."""
    cur = conn.execute(query("ack_in_transaction"), (began, job_id, token))
    acked = _first(cur.fetchone())
    return None if acked is None else bool(acked)


async def listen_cancel(conn: psycopg.AsyncConnection[Any]) -> None:
    """LISTEN for cancellations of running jobs (channel ``pgqueue_cancel``, payload = job id)."""
    await conn.execute(query("listen_cancel"))


async def listen(conn: psycopg.AsyncConnection[Any]) -> None:
    """LISTEN on pgqueue's channels (``pgqueue``: ready jobs, ``pgqueue_delayed``: delayed ones)."""
    await conn.execute(query("listen"))


async def record_failure_on(conn: psycopg.AsyncConnection[Any], envelope: str, attempts: int,
                            exception: str | None, message: str, traceback: str | None,
                            reason: str) -> uuid.UUID:
    """:meth:`Store.record_failure` on a given connection (the sync driver's own event loop has no pool)."""
    cur = await conn.execute(query("record_failure"), (envelope, attempts, exception, message, traceback, reason))
    return uuid.UUID(str(_first(await cur.fetchone())))


# pgqueue.migrate's bookkeeping when pgqueue's branch lives in the application's alembic tree.
# Synchronous, like alembic; ``conn`` is a psycopg Connection or the SQLAlchemy Connection alembic
# runs on (the statement joins its transaction). Reads of a table that may not exist run in a
# transaction (a savepoint inside the caller's) so that its absence aborts nothing.
def _versions(conn: Any, statement: bytes, params: dict[str, Any] | None = None) -> list[str]:
    driver = sync_driver_connection(conn)
    try:
        with driver.transaction():
            return [str(row[0]) for row in driver.execute(statement, params)]
    except pg_errors.UndefinedTable:
        return []


def alembic_own_versions(conn: Any) -> list[str]:
    """The revisions in pgqueue's own alembic table (``pgqueue_alembic_version``); [] when it does not exist."""
    return _versions(conn, query("alembic_own_versions"))


def pgqueue_schema_exists(conn: Any) -> bool:
    """Whether the database has a schema named ``pgqueue`` (empty or not)."""
    row = sync_driver_connection(conn).execute(query("pgqueue_schema_exists")).fetchone()
    return bool(row and row[0])


def alembic_user_versions(conn: Any, revisions: list[str]) -> list[str]:
    """Which of pgqueue's ``revisions`` the application's ``alembic_version`` records; [] when it has none."""
    return _versions(conn, query("alembic_user_versions"), {"revisions": revisions})


def alembic_user_versions_delete(conn: Any, old: list[str]) -> None:
    """Remove pgqueue's ``old`` revisions from the application's ``alembic_version``, in the caller's transaction."""
    sync_driver_connection(conn).execute(query("alembic_user_versions_delete"), {"old": old})


def alembic_user_versions_insert(conn: Any, new: list[str]) -> None:
    """Record pgqueue's ``new`` revisions in the application's ``alembic_version``, in the caller's transaction."""
    sync_driver_connection(conn).execute(query("alembic_user_versions_insert"), {"new": new})


def alembic_own_versions_drop(conn: Any) -> None:
    """Drop pgqueue's own alembic table, in the caller's transaction (its rows moved to the application's)."""
    sync_driver_connection(conn).execute(query("alembic_own_versions_drop"))


async def _execute_on(conn: Any, statement: bytes, params: tuple[Any, ...]) -> None:
    driver = await async_driver_connection(conn)
    if isinstance(driver, psycopg.AsyncConnection):
        await driver.execute(statement, params)
    else:
        driver.execute(statement, params)


def _scanned_page(rows: list[dict[str, Any]], last_columns: tuple[str, ...]) -> ScannedPage:
    """Split the rows of a bounded page query: the matches, and the scan's extent on every row."""
    if not rows:
        return ScannedPage([], 0, None)
    first = rows[0]
    last = None if first[last_columns[0]] is None else tuple(first[c] for c in last_columns)
    extra = {"scanned", *last_columns}
    matches = [{k: v for k, v in row.items() if k not in extra} for row in rows if row["id"] is not None]
    return ScannedPage(matches, int(first["scanned"]), last)
