"""The Client: dispatch, failed-job operations, statistics and workers, for one configuration."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgqueue.config import ConnectionConfig, Settings, load_settings
from pgqueue.control import check_limits
from pgqueue.envelope import EncodedJobs, Envelope, encode_many
from pgqueue.errors import (
    QueueConfigurationError,
    QueueDispatchError,
    QueueDuplicateError,
    QueueRetryError,
    QueueStorageError,
)
from pgqueue.failed import FailedJobRepository
from pgqueue.handles import JobHandle, ResultWaiter
from pgqueue.jobs import Job, check_result_ttl, registered_jobs, set_default_dispatcher
from pgqueue.limits import MAX_DELAY_SECONDS, MAX_UNIQUE_PERIOD_SECONDS, queue_name_problem, shown, unique_key_problem
from pgqueue.startup import prepare_database
from pgqueue.store import (
    CancelOutcome,
    JobStatsRow,
    QueueControl,
    QueueStats,
    RegisteredWorker,
    Store,
    Throughput,
    UniqueDispatch,
)
from pgqueue.tracing import active as tracing_active
from pgqueue.tracing import producer_carrier
from pgqueue.worker import Worker
from pgqueue.worker.options import WorkerKeywords, WorkerOptions
from pgqueue.worker.scheduler import declared_schedules, registration, sync_arguments

if TYPE_CHECKING:
    from pgqueue.testing.inline import InlineRunner

__all__ = ["Client", "QueueStats", "ScheduleInfo", "default_client", "set_default_client"]

logger = logging.getLogger("pgqueue")


def _check_delay(delay: object, job_name: str) -> float:
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay) \
            or not 0 <= delay <= MAX_DELAY_SECONDS:
        raise QueueConfigurationError(
            f"job {job_name!r}: delay must be a finite number of seconds >= 0 and at most "
            f"{MAX_DELAY_SECONDS:.0f} (10 years), got {delay!r}; the job was not dispatched"
        )
    return float(delay)


class Client:
    """Entry point to one pgqueue configuration.

    ``Client()`` reads ``[tool.pgqueue]`` and the environment; ``Client(dsn=...)`` overrides
    the database. Use as ``async with Client(...) as client:`` or call :meth:`open` and
    :meth:`close`; dispatching with your own connection needs no open queue.

    ``inline=True`` (for tests; see :func:`pgqueue.testing.inline`) runs every job at dispatch,
    in the dispatching call, instead of storing it.
    """

    def __init__(self, dsn: str | None = None, *, settings: Settings | None = None,
                 pyproject: Path | None = None, pool_size: int = 10, inline: bool = False) -> None:
        self.settings = settings if settings is not None else load_settings(pyproject, dsn=dsn)
        self.pool_size = pool_size
        #: Every dispatch runs the job at once instead of storing it (:mod:`pgqueue.testing.inline`).
        self.inline = inline
        self._pools: dict[str, AsyncConnectionPool[Any]] = {}
        self._stores: dict[str, Store] = {}
        self._dsn: str | None = None
        self._lock = asyncio.Lock()
        self._waiter: ResultWaiter | None = None

    # ---------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> Client:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Resolve the database (starting the embedded one if nothing is configured) and open the pool."""
        await self._pool()

    async def close(self) -> None:
        """Close the queue's connection pools (and the connection listening for awaited results)."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            await waiter.close()
        pools, self._pools, self._stores = list(self._pools.values()), {}, {}
        for pool in pools:
            await pool.close()

    @property
    def dsn(self) -> str:
        """The database DSN in use (after :meth:`open`)."""
        if self._dsn is None:
            configured = self.settings.database_dsn()
            if configured is None:
                raise QueueConfigurationError("the queue is not open yet and no DSN is configured")
            return configured
        return self._dsn

    def connection(self, name: str | None = None) -> ConnectionConfig:
        """The named connection's settings."""
        return self.settings.connection(name)

    async def _pool(self, connection: ConnectionConfig | None = None) -> AsyncConnectionPool[Any]:
        return (await self._store(connection)).pool

    async def _store(self, connection: ConnectionConfig | None = None) -> Store:
        """The store of a connection's database (the default one's without), opening its pool on first use."""
        async with self._lock:
            if connection is not None and connection.dsn:
                dsn = connection.dsn
            else:
                if self._dsn is None:
                    self._dsn = await asyncio.to_thread(prepare_database, self.settings)
                dsn = self._dsn
            store = self._stores.get(dsn)
            if store is None:
                # One pool per DSN, whichever call opens it first (open() passes no connection):
                # any database connection on this DSN that is behind PgBouncer turns them off.
                prepared = all(c.prepared_statements and not c.transaction_pooler
                               for c in self.settings.connections.values()
                               if c.driver == "database" and (c.dsn or self._dsn) == dsn)
                pool = AsyncConnectionPool(
                    dsn, min_size=1, max_size=self.pool_size, open=False, name="pgqueue",
                    kwargs={"autocommit": True, "prepare_threshold": 5 if prepared else None},
                )
                try:
                    # One direct attempt first: a host that does not resolve or a refused login
                    # fails now with libpq's own words, not after 30 s of the pool's silent retries.
                    probe = await psycopg.AsyncConnection.connect(dsn, connect_timeout=10)
                    await probe.close()
                    await pool.open(wait=True, timeout=30)
                except Exception as exc:
                    raise QueueStorageError(f"cannot connect to the database: {exc}") from exc
                self._pools[dsn] = pool
                store = self._stores[dsn] = Store(pool)
            return store

    async def pool(self, connection: str | None = None) -> AsyncConnectionPool[Any]:
        """The open connection pool of a connection (default: the default connection)."""
        return await self._pool(self.settings.connection(connection))

    async def check_schema(self, connection: str | None = None) -> None:
        """Raise QueueStorageError with "run pgqueue migrate" if the schema is missing
        (in the default connection's database, or the named connection's)."""
        store = await self._store(None if connection is None else self.settings.connection(connection))
        await store.check_schema()

    # ----------------------------------------------------------------- dispatch
    def envelope(self, job: Job, *, queue: str | None = None, priority: int | None = None,
                 connection: str | None = None) -> tuple[Envelope, ConnectionConfig]:
        """Fix a job's envelope for a connection (validating it); nothing is stored."""
        if not isinstance(job, Job):
            raise QueueDispatchError(f"can only dispatch Job instances, got {type(job).__name__} {job!r}")
        config = self.settings.connection(connection or type(job).connection)
        envelope = Envelope.build(job, config, queue=queue, priority=priority)
        carrier = producer_carrier(envelope.queue, job_id=envelope.id)  # None unless traced (pgqueue.tracing)
        if carrier is not None:
            envelope = dataclasses.replace(envelope, trace=carrier)
        return envelope, config

    async def dispatch(self, job: Job, *, conn: Any = None, delay: float = 0.0, queue: str | None = None,  # noqa: PLR0913  # the public API: one keyword per envelope setting
                   priority: int | None = None, connection: str | None = None,
                   unique_key: str | None = None, unique_scope: str = "queued",
                   unique_for: float | None = None, result_ttl: float | None = None) -> JobHandle:
        """Enqueue one job; returns its id as a :class:`~pgqueue.JobHandle` (a UUID that can also
        follow the job: ``status()``, ``result()``). See :meth:`Job.dispatch`.

        With ``unique_key`` it is :meth:`dispatch_unique` and returns the id of the job holding the
        key (an earlier one for a duplicate). ``result_ttl``: seconds to keep this job's result
        (0: none; default: its job type's, see :mod:`pgqueue.results`).
        """
        if unique_key is None and getattr(type(job), "unique_by", None):  # not a Job: envelope() says so
            unique_key = job.derived_unique_key()
            unique_scope, unique_for = type(job).unique_scope, type(job).unique_period
        if unique_key is not None:
            return self.job((await self.dispatch_unique(job, unique_key, scope=unique_scope, period=unique_for,
                                                        conn=conn, delay=delay, queue=queue, priority=priority,
                                                        connection=connection)).id)
        envelope, config = self.envelope(job, queue=queue, priority=priority, connection=connection)
        if result_ttl is not None:
            envelope = dataclasses.replace(envelope, result_ttl=check_result_ttl(result_ttl, f"job {envelope.name!r}"))
        delay = _check_delay(delay, envelope.name)
        if (inline := self._inline(config)) is not None:
            return self.job(await inline.dispatch(job, envelope, delay))
        text = envelope.encode(config.max_payload_bytes)
        what = f"dispatching job {envelope.name!r}"
        if conn is not None:
            await Store.enqueue_on(conn, text, delay, what=what)
        else:
            await (await self._store(config)).enqueue(text, delay, what=what)
        return self.job(envelope.id)

    # --- issue 26: results ---
    def job(self, job_id: uuid.UUID | str) -> JobHandle:
        """A :class:`~pgqueue.JobHandle` for any job id (its status and result, through this client)."""
        try:
            return JobHandle(job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id)), self)
        except ValueError:
            raise QueueConfigurationError(f"not a job id (a UUID): {str(job_id)[:80]!r}") from None

    def _result_waiter(self) -> ResultWaiter:
        """The one connection listening for job ends, shared by every ``result()`` of this client."""
        if self._waiter is None:
            # LISTEN needs a direct connection: the default connection's listen_dsn when it has one.
            self._waiter = ResultWaiter(lambda: self.settings.connection(None).listen_dsn or self.dsn, self._store)
        return self._waiter

    async def dispatch_unique(self, job: Job, key: str, *, scope: str = "queued", period: float | None = None,  # noqa: PLR0913  # the public API, as dispatch
                          conn: Any = None, delay: float = 0.0, queue: str | None = None,
                          priority: int | None = None, connection: str | None = None,
                          raise_on_duplicate: bool = False) -> UniqueDispatch:
        """Enqueue one job unless a job already holds ``key``; PostgreSQL decides, race-free.

        ``scope``: ``"queued"`` (default: while a job of the key waits, ready or delayed),
        ``"active"`` (while one waits or runs) or ``"period"`` (for ``period`` seconds after
        the dispatch that took the key, even once that job finished). Returns the id of the job
        holding the key and whether it is an earlier one (``duplicate``, nothing inserted);
        ``raise_on_duplicate=True`` raises QueueDuplicateError instead. With ``conn`` the job
        joins the caller's transaction; while another transaction holds the key uncommitted,
        this call waits for it to end.
        """
        period_seconds = self._check_unique(key, scope, period)
        envelope, config = self.envelope(job, queue=queue, priority=priority, connection=connection)
        delay = _check_delay(delay, envelope.name)
        if (inline := self._inline(config)) is not None:
            return await inline.dispatch_unique(job, envelope, delay)
        text = envelope.encode(config.max_payload_bytes)
        what = f"dispatching job {envelope.name!r} with unique key {shown(key)}"
        if conn is not None:
            result = await Store.enqueue_unique_on(conn, text, delay, key, scope, period_seconds, what=what)
        else:
            result = await (await self._store(config)).enqueue_unique(text, delay, key, scope, period_seconds,
                                                                      what=what)
        if result.duplicate and raise_on_duplicate:
            raise QueueDuplicateError(
                f"job {envelope.name!r} not dispatched: job {result.id} holds unique key {key!r} ({scope})")
        return result

    def dispatch_sync(self, job: Job, *, conn: Any, delay: float = 0.0, queue: str | None = None,
                  priority: int | None = None, connection: str | None = None) -> JobHandle:
        """Synchronous :meth:`dispatch` on the caller's psycopg or SQLAlchemy connection (its transaction)."""
        envelope, config = self.envelope(job, queue=queue, priority=priority, connection=connection)
        delay = _check_delay(delay, envelope.name)
        if (inline := self._inline(config)) is not None:
            return self.job(inline.dispatch_blocking(job, envelope, delay))
        text = envelope.encode(config.max_payload_bytes)
        Store.enqueue_on_sync(conn, text, delay, what=f"dispatching job {envelope.name!r}")
        return self.job(envelope.id)

    async def dispatch_many(self, jobs: Iterable[Job], *, conn: Any = None, delay: float | Iterable[float] = 0.0,
                        queue: str | None = None, connection: str | None = None,
                        unique_keys: Sequence[str | None] | None = None, unique_scope: str = "queued",
                        unique_for: float | None = None) -> list[JobHandle]:
        """Enqueue many jobs in one round trip; returns their ids in order (as :class:`~pgqueue.JobHandle` s).

        ``delay`` is one delay for all, or one per job. All jobs go to database connections of
        one database; with ``conn`` they join the caller's transaction. Every job is validated
        as :meth:`dispatch` does before anything is stored: one bad job stores none.

        ``unique_keys`` (one per job, None for a job without a key) makes it
        :meth:`dispatch_unique_many`: the ids returned are those of the jobs holding each key.
        """
        if unique_keys is None and not isinstance(jobs, list | tuple):
            jobs = list(jobs)
        if self.inline:
            return await self._dispatch_many_inline(list(jobs), delay, queue, connection, unique_keys)
        if unique_keys is None and any(getattr(type(j), "unique_by", None) for j in jobs):
            jobs = list(jobs)
            derived = {(type(j).unique_scope, type(j).unique_period) for j in jobs
                       if getattr(type(j), "unique_by", None)}
            if len(derived) > 1:
                raise QueueDispatchError("dispatch_many: the jobs' classes derive unique keys of different scopes "
                                         f"{sorted(derived, key=str)}; dispatch them in one batch per scope")
            (unique_scope, unique_for), = derived
            unique_keys = [j.derived_unique_key() for j in jobs]
        if unique_keys is not None:
            dispatched = await self.dispatch_unique_many(jobs, unique_keys, scope=unique_scope, period=unique_for,
                                                     conn=conn, delay=delay, queue=queue, connection=connection)
            return [self.job(d.id) for d in dispatched]
        encoded = self.encode_many(jobs, queue=queue, connection=connection)
        if not encoded.ids:
            return []
        delays = self._delays(delay, encoded.names)
        what = f"dispatching {len(encoded.ids)} jobs"
        if conn is not None:
            await Store.enqueue_many_on(conn, encoded.text, delays, what=what)
        else:
            await (await self._store(encoded.connections[0])).enqueue_many(encoded.text, delays, what=what)
        return [self.job(job_id) for job_id in encoded.ids]

    async def dispatch_unique_many(self, jobs: Iterable[Job], keys: Sequence[str | None], *, scope: str = "queued",
                               period: float | None = None, conn: Any = None,
                               delay: float | Iterable[float] = 0.0, queue: str | None = None,
                               connection: str | None = None) -> list[UniqueDispatch]:
        """:meth:`dispatch_unique` for many jobs, in one transaction (the caller's with ``conn``).

        ``keys`` has one key per job (None: that job has no key). A key repeated inside the
        batch, or held by an existing job, gives the holder's id with ``duplicate=True``. One
        statement per job (unlike :meth:`dispatch_many`): each needs its own conflict check.
        """
        jobs = list(jobs)
        if self.inline:
            return [UniqueDispatch(id=job_id, duplicate=False)
                    for job_id in await self._dispatch_many_inline(jobs, delay, queue, connection, keys)]
        if isinstance(keys, str) or len(keys) != len(jobs):
            raise QueueDispatchError(f"dispatch_unique_many: {len(jobs)} jobs need one key each (None for none), "
                                     f"got {keys!r}"[:300])
        if not jobs:
            return []
        encoded = self.encode_many(jobs, queue=queue, connection=connection)
        delays = self._delays(delay, encoded.names) or [0.0] * len(jobs)
        period_seconds = None
        for position, key in enumerate(keys, 1):
            if key is not None:
                try:
                    period_seconds = self._check_unique(key, scope, period)
                except QueueConfigurationError as exc:
                    raise QueueConfigurationError(
                        f"dispatch_unique_many: key {position} of {len(keys)}: {exc}") from None
        texts = _split_envelopes(encoded.text)
        what = f"dispatching {len(jobs)} jobs with unique keys"
        if conn is not None:
            return await Store.enqueue_unique_many_on(conn, texts, delays, list(keys), scope, period_seconds,
                                                      what=what)
        store = await self._store(encoded.connections[0])
        return await store.enqueue_unique_many(texts, delays, list(keys), scope, period_seconds, what=what)

    @staticmethod
    def _check_unique(key: object, scope: object, period: object) -> float | None:
        """Refuse what ``pgqueue.enqueue_unique`` would refuse, naming the value; the period as a float."""
        if not isinstance(scope, str) or scope not in ("queued", "active", "period"):
            raise QueueConfigurationError(
                f"unique scope must be 'queued', 'active' or 'period', got {scope!r}; the job was not dispatched")
        problem = unique_key_problem(key)
        if problem is not None:
            raise QueueConfigurationError(f"{problem}; the job was not dispatched")
        if (scope == "period") != (period is not None):
            raise QueueConfigurationError(
                f"unique scope 'period' needs period=<seconds> (and only it takes one), got scope {scope!r} and "
                f"period {period!r}; the job was not dispatched")
        if period is None:
            return None
        if isinstance(period, bool) or not isinstance(period, int | float) or not math.isfinite(period) \
                or not 0 < period <= MAX_UNIQUE_PERIOD_SECONDS:
            raise QueueConfigurationError(
                f"unique period must be a finite number of seconds above 0 and at most "
                f"{MAX_UNIQUE_PERIOD_SECONDS:.0f} (10 years), got {type(period).__name__} {period!r}; "
                "the job was not dispatched")
        return float(period)

    def encode_many(self, jobs: Iterable[Job], *, queue: str | None = None,
                    connection: str | None = None) -> EncodedJobs:
        """Fix, validate and encode the envelopes of :meth:`dispatch_many` (nothing is stored)."""
        settings = self.settings
        resolved: dict[str | None, ConnectionConfig] = {}

        def connection_of(job: Job) -> ConnectionConfig:
            if not isinstance(job, Job):
                raise QueueDispatchError(f"can only dispatch Job instances, got {type(job).__name__} {job!r}")
            name = connection or type(job).connection
            config = resolved.get(name)
            if config is None:
                config = resolved[name] = settings.connection(name)
                if (inline := self._inline(config)) is not None:
                    inline.check_batch(type(job).name)
                if len({c.dsn for c in resolved.values()}) > 1:
                    raise QueueDispatchError("dispatch_many: all jobs must go to connections of the same database")
            return config

        if not isinstance(jobs, list | tuple):
            jobs = list(jobs)
        carrier = None
        if jobs and isinstance(jobs[0], Job) and tracing_active():  # one PRODUCER span for the batch
            first = type(jobs[0])
            destination = queue if queue is not None else first.queue
            if destination is None:
                with contextlib.suppress(QueueConfigurationError):  # encode_many below names the problem
                    destination = settings.connection(connection or first.connection).queue
            carrier = producer_carrier(destination or "?", count=len(jobs))
        return encode_many(jobs, connection_of, queue=queue, trace=carrier)

    @staticmethod
    def _delays(delay: float | Iterable[float], names: list[str]) -> list[float] | None:
        """None when every job is ready now (the common case: no array to send), else one per job."""
        if isinstance(delay, int | float) and not isinstance(delay, bool):
            one = _check_delay(delay, names[0])
            return None if one == 0 else [one] * len(names)
        if isinstance(delay, str | bytes | bool) or not isinstance(delay, Iterable):
            raise QueueConfigurationError(
                f"dispatch_many: delay must be a number of seconds or one per job, got {type(delay).__name__} {delay!r}"
            )
        delays = list(delay)
        if len(delays) != len(names):
            raise QueueDispatchError(f"dispatch_many: {len(names)} jobs but {len(delays)} delays")
        return [_check_delay(d, name) for d, name in zip(delays, names, strict=True)]

    async def _dispatch_many_inline(self, jobs: list[Job], delay: float | Iterable[float], queue: str | None,
                                    connection: str | None, keys: Sequence[str | None] | None) -> list[JobHandle]:
        """:meth:`dispatch_many` in the inline mode: every job validated first (one bad job runs none),
        then each run at once, in order."""
        names = self.encode_many(jobs, queue=queue, connection=connection).names
        delays = self._delays(delay, names) if names else None
        if keys is not None and (isinstance(keys, str) or len(keys) != len(jobs)):
            raise QueueDispatchError(f"dispatch_unique_many: {len(jobs)} jobs need one key each (None for none), "
                                     f"got {keys!r}"[:300])
        return [await self.dispatch(job, delay=delays[i] if delays else 0.0, queue=queue, connection=connection,
                                    unique_key=None if keys is None else keys[i])
                for i, job in enumerate(jobs)]

    def _inline(self, config: ConnectionConfig) -> InlineRunner | None:
        """The runner of a job that runs at dispatch instead of being stored (the client's inline mode,
        or a connection with the deprecated ``driver = "sync"``); None: the job is stored."""
        if not self.inline and config.driver != "sync":
            return None
        # Imported here: pgqueue.testing's helpers import the client (this runs only for an inline job).
        from pgqueue.testing.inline import InlineRunner, warn_driver_sync  # noqa: PLC0415
        if not self.inline:
            warn_driver_sync(config.name)
        # Failures are recorded in the "database" connection's database, if one is configured.
        database = self.settings.connection("database")
        return InlineRunner(None if self.inline else config.name, lambda: self._store(database),
                            self.settings.database_dsn())

    # --------------------------------------------------------------- schedules
    async def schedules(self, connection: str | None = None) -> list[ScheduleInfo]:
        """The periodic jobs registered in this process for a connection, with their last enqueued
        tick (``pgqueue.schedule_ticks``) and next tick, both by the database clock."""
        config = self.settings.connection(connection)
        declared = declared_schedules(self._scheduled_jobs(config), config.name)
        if not declared:
            return []
        store = await self._store(config)
        found = {row.name: row for row in await store.schedule_ticks([s.job_name for _, s in declared])}
        listed = []
        for _, s in declared:
            row = found[s.job_name]
            next_tick, problem = None, None
            try:
                next_tick = s.next_tick(row.now)
            except Exception as exc:  # one schedule that cannot be computed does not hide the others
                problem = f"its next tick cannot be computed ({type(exc).__name__}: {exc})"
            listed.append(ScheduleInfo(name=s.job_name, expression=s.expression, timezone=s.timezone,
                                       catch_up=s.catch_up, args=dict(s.args), last_tick=row.last_tick,
                                       next_tick=next_tick, problem=problem))
        return listed

    async def sync_schedules(self, connection: str | None = None) -> list[ScheduleInfo]:
        """Register the periodic jobs registered in this process for a connection, with the template
        of their jobs, in ``pgqueue.schedules`` (``pgqueue.schedule_sync``); returns them as
        :meth:`schedules` does (without reading ``pgqueue.schedule_ticks``, which a producer may not).

        What a worker whose role may register schedules does when it starts; a worker whose role
        may not (``pgqueue_worker``) ticks what this registered. The role must be one that may
        enqueue (``pgqueue_producer``, or the owner): a registered template enqueues its job at
        every tick. Every schedule is checked (its args as a dispatch checks them) before any is
        registered: a :class:`~pgqueue.QueuePayloadError` or
        :class:`~pgqueue.QueueConfigurationError` naming the job registers nothing.
        """
        config = self.settings.connection(connection)
        declared = declared_schedules(self._scheduled_jobs(config), config.name)
        if not declared:
            return []
        registrations = [registration(job_type, schedule, config) for job_type, schedule in declared]
        store = await self._store(config)
        states = await store.register_schedules(*sync_arguments(registrations))
        return [ScheduleInfo(name=r.schedule.job_name, expression=state.expression, timezone=state.timezone,
                             catch_up=state.catch_up, args=dict(r.schedule.args), last_tick=state.last_tick,
                             next_tick=r.schedule.next_tick(state.now))
                for r, state in zip(registrations, states, strict=True)]

    # ------------------------------------------------------------- failed jobs
    async def failed(self, connection: str | None = None) -> FailedJobRepository:
        """The failed-jobs repository of a connection's database."""
        return FailedJobRepository(await self._store(self.settings.connection(connection)))

    async def retry_failed(self, failure_id: uuid.UUID | str, connection: str | None = None) -> uuid.UUID:
        """Put a failed job back (same id and envelope, attempts reset); returns the job id.

        Raises :class:`~pgqueue.QueueRetryError` for an unknown failure id or a passed deadline;
        the failure record then stays.
        """
        try:
            failure_id = uuid.UUID(str(failure_id))
        except ValueError:
            raise QueueRetryError(f"{failure_id!r} is not a failure id (a UUID, the id column of "
                                  "pgqueue.failed_jobs); nothing was retried") from None
        store = await self._store(self.settings.connection(connection))
        return await store.retry_failed(failure_id)

    async def retry_failed_all(self, queue: str | None = None, connection: str | None = None) -> int:
        """Retry every failure (of one queue, or all: None) still within its deadline; returns how many.

        A ``queue`` the queue-name rule refuses (``""`` among them) raises QueueConfigurationError.
        """
        if queue is not None:
            _checked_queue(queue, "nothing was retried")
        store = await self._store(self.settings.connection(connection))
        return await store.retry_failed_all(queue)

    # ------------------------------------------------------------ operations
    async def stats(self, connection: str | None = None) -> list[QueueStats]:
        """Per-queue counts from ``pgqueue.queue_stats``."""
        store = await self._store(self.settings.connection(connection))
        return await store.queue_stats()

    async def throughput(self, windows: Sequence[int] = (1, 5, 15), connection: str | None = None,
                         ) -> list[Throughput]:
        """Outcomes per queue over the last N minutes for each N in ``windows`` (the current minute
        and the N - 1 before it), from the history ``pgqueue.job_stats``; queues with none are absent.

        Raises :class:`~pgqueue.QueueConfigurationError` for a window that is not a whole number of
        minutes from 1 to 10080 (7 days).
        """
        wanted = list(windows)
        if not wanted or any(isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 10080 for w in wanted):
            raise QueueConfigurationError(f"throughput windows must be whole numbers of minutes from 1 to 10080, "
                                          f"got {windows!r}")
        store = await self._store(self.settings.connection(connection))
        return await store.throughput(sorted(set(wanted)))

    async def history(self, *, queue: str | None = None, name: str | None = None, since: datetime | None = None,
                      until: datetime | None = None, limit: int = 10000,
                      connection: str | None = None) -> list[JobStatsRow]:
        """The per-minute history ``pgqueue.job_stats`` (shards summed), oldest minute first: outcome
        counts, handler durations and queue latencies per queue and job name, filtered by queue, job
        name and ``since <= minute < until`` (aware datetimes; None: no bound), at most ``limit`` rows.
        """
        for bound, label in ((since, "since"), (until, "until")):
            if bound is not None and (not isinstance(bound, datetime) or bound.tzinfo is None):
                raise QueueConfigurationError(f"history {label} must be a timezone-aware datetime, got {bound!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise QueueConfigurationError(f"history limit must be an integer >= 1, got {limit!r}")
        if queue is not None:
            _checked_queue(queue, "the history was not read", what="history queue filter: ")
        store = await self._store(self.settings.connection(connection))
        return await store.job_stats(queue=queue, name=name, since=since, until=until, limit=limit)

    async def listening_workers(self, connection: str | None = None) -> int:
        """How many workers LISTEN on the connection's database (sessions listening on pgqueue's channels)."""
        store = await self._store(self.settings.connection(connection))
        return await store.listening_workers()

    async def clear(self, queue: str | None = None, connection: str | None = None) -> int:
        """Remove ready, delayed and reserved jobs of a queue (None: the connection's queue).

        A name the queue-name rule refuses (``""`` among them) raises QueueConfigurationError
        and removes nothing.
        """
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "nothing was removed")
        return await (await self._store(config)).clear(name)

    # ---------------------------------------------------------------- control
    async def cancel(self, job_id: uuid.UUID | str, connection: str | None = None) -> CancelOutcome:
        """Cancel a job: it is removed and recorded in failed_jobs with reason ``cancelled``.

        Returns ``"cancelled"`` (it was waiting), ``"cancelled_running"`` (it was reserved: its
        worker cancels the handler within milliseconds, and any later ack, release or failure of
        that attempt is refused), or, changing nothing, ``"already_cancelled"``,
        ``"already_failed"`` or ``"not_found"`` (unknown, or finished: acked jobs leave no row).
        """
        try:
            job_id = job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))
        except ValueError:
            raise QueueConfigurationError(f"{job_id!r} is not a job id (a UUID, as dispatch returned it); "
                                          "nothing was cancelled") from None
        store = await self._store(self.settings.connection(connection))
        return await store.cancel(job_id)

    async def pause(self, queue: str | None = None, connection: str | None = None) -> bool:
        """Stop every worker (every host) reserving from a queue; running jobs finish, dispatch goes on.

        Stored in the database: workers started later honour it too. Returns False if the queue
        was already paused. ``queue`` None: the connection's queue; a name the queue-name rule
        refuses (``""`` among them) raises QueueConfigurationError.
        """
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "nothing was changed")
        return await (await self._store(config)).pause(name)

    async def resume(self, queue: str | None = None, connection: str | None = None) -> bool:
        """Let workers reserve from a paused queue again (idle ones wake at once); False if it was not paused.

        ``queue`` None: the connection's queue; a name the queue-name rule refuses raises QueueConfigurationError.
        """
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "nothing was changed")
        return await (await self._store(config)).resume(name)

    async def set_limits(self, queue: str | None = None, *, concurrency: int | None = None,
                         rate_limit: int | None = None, rate_period: float | None = None,
                         burst: int | None = None, connection: str | None = None) -> None:
        """Set a queue's global limits, enforced by the database for all workers on all hosts.

        ``concurrency``: at most this many jobs of the queue reserved at once; ``rate_limit`` per
        ``rate_period`` seconds: a token bucket refilled at that rate, holding at most ``burst``
        tokens (None: ``rate_limit``, the rate per period). One reservation takes up to
        min(free slots, tokens) jobs; any window of T seconds sees at most
        ``rate_limit * T / rate_period + burst`` reservations. None clears a limit. Takes
        effect live. ``queue`` None: the connection's queue; a name the queue-name rule refuses
        raises QueueConfigurationError.
        """
        check_limits(concurrency, rate_limit, rate_period, burst)
        config = self.settings.connection(connection)
        name = _checked_queue(config.queue if queue is None else queue, "the limits were not changed")
        await (await self._store(config)).set_limits(name, concurrency, rate_limit,
                                                     None if rate_period is None else float(rate_period), burst)

    async def controls(self, connection: str | None = None) -> list[QueueControl]:
        """The controls set on queues (paused, limits), by queue name; queues never controlled are absent."""
        store = await self._store(self.settings.connection(connection))
        return await store.queue_controls()

    async def workers(self, connection: str | None = None) -> list[RegisteredWorker]:
        """The workers registered in ``pgqueue.workers``, longest running first: who each is,
        its last heartbeat, whether it is gone (stale), and the jobs it holds."""
        store = await self._store(self.settings.connection(connection))
        return await store.registered_workers()

    async def worker(self, connection: str | None = None, options: WorkerOptions | None = None,
                     **keywords: Unpack[WorkerKeywords]) -> Worker:
        """A worker for a connection: ``options`` (:class:`~pgqueue.WorkerOptions`, whose fields are
        documented there), with ``keywords`` replacing its fields (``client.worker(concurrency=4)``)."""
        config = self.settings.connection(connection)
        if config.driver != "database":
            raise QueueConfigurationError(
                f"connection {config.name!r} uses the {config.driver!r} driver, which runs jobs at dispatch; "
                "workers serve database connections"
            )
        try:
            options = WorkerOptions.of(options, **keywords) if keywords or options is None else options
        except QueueConfigurationError as exc:
            raise QueueConfigurationError(f"worker of connection {config.name!r}: {exc}") from None
        store = await self._store(config)
        if options.schedules is True:
            options = dataclasses.replace(options, schedules=self._scheduled_jobs(config))
        return Worker(config, store, options, dsn=config.dsn or self.dsn)

    def _scheduled_jobs(self, config: ConnectionConfig) -> list[type[Job]]:
        """The registered periodic jobs whose connection (the job's, else the default) is ``config``."""
        default = self.settings.connection(None).name
        return [job_type for job_type in registered_jobs().values()
                if getattr(job_type, "schedule", None) is not None
                and (job_type.connection or default) == config.name]


def _checked_queue(name: object, consequence: str, *, what: str = "") -> str:
    """``name`` if the queue-name rule accepts it, else QueueConfigurationError with the rule's message."""
    problem = queue_name_problem(name)
    if problem is not None:
        raise QueueConfigurationError(f"{what}{problem}; {consequence}")
    return str(name)


def _split_envelopes(array_text: str) -> list[str]:
    """The envelopes of an encoded JSON array, each as its own JSON text."""
    return [json.dumps(e) for e in json.loads(array_text)]


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A periodic job as ``Client.schedules()`` and ``pgqueue schedule:list`` show it."""

    name: str
    expression: str
    timezone: str
    catch_up: int
    args: dict[str, Any]
    last_tick: datetime | None
    #: None when it cannot be computed (then ``problem`` says why).
    next_tick: datetime | None
    #: What is wrong with this schedule (its next tick cannot be computed), or None.
    problem: str | None = None

    def to_data(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 strings."""
        return {"name": self.name, "expression": self.expression, "timezone": self.timezone,
                "catch_up": self.catch_up, "args": self.args,
                "last_tick": None if self.last_tick is None else self.last_tick.isoformat(),
                "next_tick": None if self.next_tick is None else self.next_tick.isoformat(),
                "problem": self.problem}


_default: Client | None = None


def default_client() -> Client:
    """The process-wide default Client, built from configuration on first use."""
    global _default  # noqa: PLW0603
    if _default is None:
        _default = Client()
    return _default


def set_default_client(client: Client | None) -> None:
    """Make ``queue`` the one :meth:`Job.dispatch` uses when no ``using=`` is given."""
    global _default  # noqa: PLW0603
    _default = client


set_default_dispatcher(default_client)
