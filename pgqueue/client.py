"""The Client: dispatch, failed-job operations, statistics and workers, for one configuration."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgqueue.client_operations import ClientOperations, ScheduleInfo
from pgqueue.composition import Composition, check_after, check_policy, parent_ids
from pgqueue.config import ConnectionConfig, Settings, load_settings
from pgqueue.debounce import DebouncedDispatching, debounce_arguments
from pgqueue.dispatch_checks import check_delay, check_unique, with_result_ttl
from pgqueue.envelope import EncodedJobs, Envelope, encode_many
from pgqueue.errors import (
    QueueConfigurationError,
    QueueDispatchError,
    QueueDuplicateError,
    QueueStorageError,
)
from pgqueue.handles import JobHandle, ResultWaiter
from pgqueue.jobs import Job, set_default_dispatcher
from pgqueue.limits import shown
from pgqueue.startup import prepare_database
from pgqueue.store import (
    QueueStats,
    Store,
    UniqueDispatch,
    Wait,
)
from pgqueue.sync_dispatch import SyncDispatching
from pgqueue.tracing import active as tracing_active
from pgqueue.tracing import producer_carrier
from pgqueue.worker import Worker
from pgqueue.worker.options import WorkerKeywords, WorkerOptions
from pgqueue.workflow_client import WorkflowOperations

if TYPE_CHECKING:
    from pgqueue.testing.inline import InlineRunner

__all__ = ["Client", "QueueStats", "ScheduleInfo", "default_client", "set_default_client"]

logger = logging.getLogger("pgqueue")


class Client(ClientOperations, Composition, DebouncedDispatching, SyncDispatching, WorkflowOperations):
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
                # One pool per DSN (the first call opens it); PgBouncer on it: no prepared statements, no SET.
                on = [c for c in self.settings.connections.values()
                      if c.driver == "database" and (c.dsn or self._dsn) == dsn]
                prepared = all(c.prepared_statements and not c.transaction_pooler for c in on)
                configure = None if any(c.transaction_pooler for c in on) else Store.read_committed  # issue 27
                pool = AsyncConnectionPool(
                    dsn, min_size=1, max_size=self.pool_size, open=False, name="pgqueue", configure=configure,
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
                 connection: str | None = None, partition: str | None = None) -> tuple[Envelope, ConnectionConfig]:
        """Fix a job's envelope for a connection (validating it); nothing is stored."""
        if not isinstance(job, Job):
            raise QueueDispatchError(f"can only dispatch Job instances, got {type(job).__name__} {job!r}")
        config = self.settings.connection(connection or type(job).connection)
        envelope = Envelope.build(job, config, queue=queue, priority=priority, partition=partition)
        carrier = producer_carrier(envelope.queue, job_id=envelope.id)  # None unless traced (pgqueue.tracing)
        if carrier is not None:
            envelope = dataclasses.replace(envelope, trace=carrier)
        return envelope, config

    async def dispatch(self, job: Job, *, conn: Any = None, delay: float = 0.0, queue: str | None = None,  # noqa: PLR0913  # the public API: one keyword per envelope setting
                   priority: int | None = None, connection: str | None = None,
                   unique_key: str | None = None, unique_scope: str = "queued",
                   unique_for: float | None = None, result_ttl: float | None = None,
                   debounce: float | None = None, key: str | None = None, max_wait: float | None = None,
                   partition: str | None = None,
                   after: Iterable[uuid.UUID | str] | uuid.UUID | str | None = None,
                   on_parent_failure: str = "cancel") -> JobHandle:
        """Enqueue one job; returns its id as a :class:`~pgqueue.JobHandle` (a UUID that can also
        follow the job: ``status()``, ``result()``). See :meth:`Job.dispatch`.

        ``after``: job ids or handles; the job runs once every one of them has succeeded (if one
        fails or is cancelled, ``on_parent_failure="cancel"`` cancels it with reason
        ``dependency_failed``, ``"run"`` runs it anyway). See :mod:`pgqueue.composition`.

        With ``unique_key`` it is :meth:`dispatch_unique` and returns the id of the job holding the
        key (an earlier one for a duplicate). ``result_ttl``: seconds to keep this job's result
        (0: none; default: its job type's, see :mod:`pgqueue.results`). With ``debounce=<seconds>``
        and ``key=`` (and optionally ``max_wait=``) it is :meth:`dispatch_debounced` and returns the
        id of the job of the key's open window. ``partition``: the job's partition (default: its job
        type's ``partition_by``; see the README, "Partitions"; not with ``debounce``).
        """
        if debounce is not None or key is not None or max_wait is not None:
            check_after(after, f"dispatching {type(job).__name__}", debounced=True)
            if partition is not None:
                raise QueueConfigurationError("debounce= takes its partition from the job type's partition_by, "
                                              "not from partition=; the job was not dispatched")
            key, window = debounce_arguments(job, debounce, key, max_wait, delay, unique_key)
            return self.job((await self.dispatch_debounced(job, key, window, max_wait=max_wait, conn=conn, queue=queue,
                             priority=priority, connection=connection, result_ttl=result_ttl)).id)
        if unique_key is None and getattr(type(job), "unique_by", None):  # not a Job: envelope() says so
            unique_key = job.derived_unique_key()
            unique_scope, unique_for = type(job).unique_scope, type(job).unique_period
        parents = None if after is None else parent_ids(after, f"dispatching {type(job).__name__}")
        check_after(after, f"dispatching {type(job).__name__}", unique_key=unique_key)
        if unique_key is not None:
            return self.job((await self.dispatch_unique(job, unique_key, scope=unique_scope, period=unique_for,
                                                        conn=conn, delay=delay, queue=queue, priority=priority,
                                                        connection=connection, partition=partition)).id)
        envelope, config = self.envelope(job, queue=queue, priority=priority, connection=connection,
                                         partition=partition)
        envelope = with_result_ttl(envelope, result_ttl)
        delay = check_delay(delay, envelope.name)
        if (inline := self._inline(config)) is not None:
            return self.job(await inline.dispatch(job, envelope, delay))
        text = envelope.encode(config.max_payload_bytes)
        what = f"dispatching job {envelope.name!r}"
        if parents is not None:
            link = Wait([envelope.id], parents, check_policy(on_parent_failure, what))
            await self._store_linked(config, conn, f"[{text}]", [delay] if delay else None, [link], what)
        elif conn is not None:
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
                          raise_on_duplicate: bool = False, partition: str | None = None) -> UniqueDispatch:
        """Enqueue one job unless a job already holds ``key``; PostgreSQL decides, race-free.

        ``scope``: ``"queued"`` (default: while a job of the key waits, ready or delayed),
        ``"active"`` (while one waits or runs) or ``"period"`` (for ``period`` seconds after
        the dispatch that took the key, even once that job finished). Returns the id of the job
        holding the key and whether it is an earlier one (``duplicate``, nothing inserted);
        ``raise_on_duplicate=True`` raises QueueDuplicateError instead. With ``conn`` the job
        joins the caller's transaction; while another transaction holds the key uncommitted,
        this call waits for it to end.
        """
        period_seconds = check_unique(key, scope, period)
        envelope, config = self.envelope(job, queue=queue, priority=priority, connection=connection,
                                         partition=partition)
        delay = check_delay(delay, envelope.name)
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

    async def dispatch_many(self, jobs: Iterable[Job], *, conn: Any = None, delay: float | Iterable[float] = 0.0,  # noqa: PLR0913  # the public API, as dispatch
                        queue: str | None = None, connection: str | None = None,
                        unique_keys: Sequence[str | None] | None = None, unique_scope: str = "queued",
                        unique_for: float | None = None, partition: str | None = None,
                        after: Iterable[uuid.UUID | str] | uuid.UUID | str | None = None,
                        on_parent_failure: str = "cancel") -> list[JobHandle]:
        """Enqueue many jobs in one round trip; returns their ids in order (as :class:`~pgqueue.JobHandle` s).

        ``delay`` is one delay for all, or one per job. All jobs go to database connections of
        one database; with ``conn`` they join the caller's transaction. Every job is validated
        as :meth:`dispatch` does before anything is stored: one bad job stores none.

        ``unique_keys`` (one per job, None for a job without a key) makes it
        :meth:`dispatch_unique_many`: the ids returned are those of the jobs holding each key.
        ``partition``: every job's partition (default: each job type's ``partition_by``).
        ``after``: every job waits for these parents, as in :meth:`dispatch`.
        """
        if after is not None and not self.inline:
            return await self._dispatch_many_after(jobs, after, on_parent_failure, unique_keys is not None, conn=conn,
                                                   delay=delay, queue=queue, connection=connection,
                                                   partition=partition)
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
                                                     conn=conn, delay=delay, queue=queue, connection=connection,
                                                     partition=partition)
            return [self.job(d.id) for d in dispatched]
        encoded = self.encode_many(jobs, queue=queue, connection=connection, partition=partition)
        if not encoded.ids:
            return []
        delays = self._delays(delay, encoded.names)
        what = f"dispatching {len(encoded.ids)} jobs"
        if conn is not None:
            await Store.enqueue_many_on(conn, encoded.text, delays, what=what)
        else:
            await (await self._store(encoded.connections[0])).enqueue_many(encoded.text, delays, what=what)
        return [self.job(job_id) for job_id in encoded.ids]

    async def dispatch_unique_many(self, jobs: Iterable[Job], keys: Sequence[str | None], *, scope: str = "queued",  # noqa: PLR0913  # the public API, as dispatch_many
                               period: float | None = None, conn: Any = None,
                               delay: float | Iterable[float] = 0.0, queue: str | None = None,
                               connection: str | None = None, partition: str | None = None) -> list[UniqueDispatch]:
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
        encoded = self.encode_many(jobs, queue=queue, connection=connection, partition=partition)
        delays = self._delays(delay, encoded.names) or [0.0] * len(jobs)
        period_seconds = None
        for position, key in enumerate(keys, 1):
            if key is not None:
                try:
                    period_seconds = check_unique(key, scope, period)
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

    def encode_many(self, jobs: Iterable[Job], *, queue: str | None = None,
                    connection: str | None = None, partition: str | None = None) -> EncodedJobs:
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
        return encode_many(jobs, connection_of, queue=queue, trace=carrier, partition=partition)

    @staticmethod
    def _delays(delay: float | Iterable[float], names: list[str]) -> list[float] | None:
        """None when every job is ready now (the common case: no array to send), else one per job."""
        if isinstance(delay, int | float) and not isinstance(delay, bool):
            one = check_delay(delay, names[0])
            return None if one == 0 else [one] * len(names)
        if isinstance(delay, str | bytes | bool) or not isinstance(delay, Iterable):
            raise QueueConfigurationError(
                f"dispatch_many: delay must be a number of seconds or one per job, got {type(delay).__name__} {delay!r}"
            )
        delays = list(delay)
        if len(delays) != len(names):
            raise QueueDispatchError(f"dispatch_many: {len(names)} jobs but {len(delays)} delays")
        return [check_delay(d, name) for d, name in zip(delays, names, strict=True)]

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


def _split_envelopes(array_text: str) -> list[str]:
    """The envelopes of an encoded JSON array, each as its own JSON text."""
    return [json.dumps(e) for e in json.loads(array_text)]


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
