"""The worker's hot path: reserve (batched) -> execute (concurrent) -> complete (batched)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgqueue.config import ConnectionConfig
from pgqueue.context import JobContext, SyncJobContext, describe
from pgqueue.envelope import Envelope
from pgqueue.errors import QueueConfigurationError, QueueError, QueueLeaseError, QueuePayloadError
from pgqueue.jobs import Job, has_sync_handle, lookup, registered_jobs
from pgqueue.resources import query
from pgqueue.storage import is_transient, translate
from pgqueue.store import Store
from pgqueue.worker.completer import Completer
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.maintenance import Maintenance, check_seconds
from pgqueue.worker.notifier import Notifier
from pgqueue.worker.scheduler import Scheduler, declared_schedules

logger = logging.getLogger("pgqueue.worker")

Scope = Callable[[JobContext], AbstractAsyncContextManager[Any]]


@dataclass
class WorkerStats:
    """What a worker did so far."""

    reserved: int = 0
    processed: int = 0
    succeeded: int = 0
    retried: int = 0
    failed: int = 0
    #: Reservations whose lease was lost: a decision or an ack the fence refused, or a handler
    #: stopped because its lease could not be renewed. Such a job runs again elsewhere.
    lost: int = 0
    #: VACUUMs of pgqueue.jobs run by this worker's table maintenance.
    vacuums: int = 0


class _Settler:
    """A handler's decisions, applied through the worker's pool."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    async def _one(self, statement: str, params: tuple[Any, ...]) -> Any:
        async with self._worker.pool.connection() as conn:
            cur = await conn.execute(query(statement), params)
            row = await cur.fetchone()
        return None if row is None else row[0]

    async def delete(self, job_id: uuid.UUID, token: int) -> bool:
        async with self._worker.pool.connection() as conn:
            cur = await conn.execute(query("ack"), ([job_id], [token]))
            refused = await cur.fetchall()
        return not refused

    async def release(self, job_id: uuid.UUID, token: int, delay: float) -> bool:
        return bool(await self._one("release", (job_id, token, delay)))

    async def fail(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                   traceback_text: str | None, reason: str) -> bool:
        return bool(await self._one("fail", (job_id, token, exception, message, traceback_text, reason)))

    async def extend(self, job_id: uuid.UUID, token: int, seconds: float) -> float | None:
        left = await self._one("extend", (job_id, token, seconds))
        return None if left is None else float(left)

    async def snooze(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        return await self._worker.store.snooze(job_id, token, delay)


class Worker:
    """Runs jobs of one connection's queues.

    Create with ``await queue.worker("database", queues=("high", "default"), concurrency=4)``
    and call :meth:`run`. Queues are served in the order given: while ``high`` has ready
    jobs, ``default`` waits (a steady stream on ``high`` can starve ``default``).

    Options:
        concurrency: handlers running at once.
        poll_interval: the longest an idle worker sleeps without a notification (seconds);
            it normally sleeps until the next delayed job is due.
        drain_timeout: on stop, how long running handlers may take to finish.
        retry_after: the lease in seconds (default: the connection's).
        timeout: cap on every job's timeout (default: none beyond the envelope's).
        scope: ``scope(context)`` returns an async context manager entered around each
            execution, for per-job resources (a database session, a tracing span, ...).
        ack_flush_interval / ack_batch_size: the completer's batching.
        listen: LISTEN for notifications (False: poll every ``poll_interval``).
        listen_dsn: where to LISTEN (default: the connection's listen_dsn, else its dsn).
        fetch_cooldown: with a backlog, how long to wait for more slots to free up so the
            next reservation is a batch rather than a single job (seconds).
        maintenance_interval: how often the worker checks whether ``pgqueue.jobs`` needs a
            VACUUM (seconds, default 2; None or 0: never). It vacuums when the table has
            at least its autovacuum threshold of dead tuples and autovacuum does not run on it
            (off server-wide, or ``autovacuum_enabled = false`` on the table) or is lagging
            (no VACUUM or autovacuum in the last ``vacuum_grace`` seconds). One worker of the
            database at a time (advisory lock ``maintenance.VACUUM_LOCK_KEY``). The role must
            own the table (or the database; PostgreSQL 17+: or hold MAINTAIN on it); otherwise
            the worker warns once and stops maintaining. Behind a transaction pooler it needs a
            direct ``listen_dsn``, else it is off.
        vacuum_grace: with autovacuum on, how long after the last VACUUM or autovacuum the
            worker defers to autovacuum (seconds, default 60).
        heartbeat: renew the leases of running handlers (default: the connection's
            ``heartbeat``, on unless configured off). Every ``(retry_after - lease_margin) / 3``
            seconds one fenced statement renews all of them to ``retry_after`` from then, so a
            job may run as long as its ``timeout`` while ``retry_after`` only decides how soon a
            crashed worker's jobs run again. A handler whose lease cannot be renewed (database
            unreachable) is stopped ``lease_margin`` before its lease ends; one whose renewal
            the fence refuses (the lease was lost) is stopped at once; both count as ``lost``.
            Off: a handler's time limit is also ``lease_margin`` inside its lease, which only
            ``context.extend`` moves.
        threads: the thread pool that runs sync handlers (a plain ``def handle``), at most this
            many at once (default: ``min(concurrency, 32)``). A sync handler waiting for a
            thread holds one of the ``concurrency`` slots and its time limit runs.
        schedules: enqueue the due ticks of periodic jobs (default True: those registered in this
            process whose connection is this one or unset; ``Queue.worker`` passes the list that
            resolves to this connection; False: none). Every worker may: each tick is enqueued once.
    """

    def __init__(self, config: ConnectionConfig, store: Store, *, dsn: str,
                 queues: Sequence[str], concurrency: int = 10, poll_interval: float = 5.0,
                 drain_timeout: float = 30.0, retry_after: float | None = None, timeout: float | None = None,
                 scope: Scope | None = None, ack_flush_interval: float = 0.005, ack_batch_size: int = 500,
                 listen: bool = True, listen_dsn: str | None = None, fetch_cooldown: float = 0.002,
                 maintenance_interval: float | None = 2.0, vacuum_grace: float = 60.0,
                 heartbeat: bool | None = None, threads: int | None = None,
                 schedules: bool | Sequence[type[Job]] = True) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise QueueConfigurationError(f"worker concurrency must be an integer >= 1, got {concurrency!r}")
        if not queues or any(not isinstance(q, str) or not q for q in queues):
            raise QueueConfigurationError(f"worker queues must be non-empty names, got {queues!r}")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, int | float) \
                or not 0 < poll_interval < math.inf:
            raise QueueConfigurationError(f"poll_interval must be a finite number of seconds > 0, "
                                          f"got {poll_interval!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise QueueConfigurationError(f"threads must be an integer >= 1 (or None: min(concurrency, 32)), "
                                          f"got {threads!r}")
        interval = 0.0 if maintenance_interval is None else check_seconds(
            maintenance_interval, "maintenance_interval", " (None or 0: no table maintenance)")
        grace = check_seconds(vacuum_grace, "vacuum_grace")
        self.config = config
        self.store = store
        self.pool: AsyncConnectionPool[Any] = store.pool
        self.queues = list(dict.fromkeys(queues))
        self.concurrency = concurrency
        self.poll_interval = float(poll_interval)
        self.drain_timeout = float(drain_timeout)
        self.lease = float(retry_after if retry_after is not None else config.retry_after)
        if self.lease <= config.lease_margin:
            raise QueueConfigurationError(
                f"retry_after ({self.lease}s) must exceed the lease margin ({config.lease_margin}s)"
            )
        self.timeout_cap = timeout
        #: The lease heartbeat (None when off).
        self.heartbeat: Heartbeat | None = None
        if config.heartbeat if heartbeat is None else heartbeat:
            self.heartbeat = Heartbeat(self.store, lease=self.lease, period=(self.lease - config.lease_margin) / 3)
        elif config.heartbeat:
            logger.info("pgqueue: lease heartbeat off on connection %r, whose jobs may have timeouts longer than "
                        "the lease: a handler that does not call context.extend() is stopped %gs before its "
                        "%gs lease ends", config.name, config.lease_margin, self.lease)
        self.threads = threads if threads is not None else min(concurrency, 32)
        #: The periodic-job scheduler (issue 13): ticks of this process's registered schedules.
        scheduled = list(registered_jobs().values()) if schedules is True else list(schedules or ())
        self.scheduler = Scheduler(self.store, config, declared_schedules(scheduled, config.name))
        self._thread_pool: ThreadPoolExecutor | None = None
        self.fetch_cooldown = float(fetch_cooldown)
        self.scope = scope
        direct = listen_dsn or config.listen_dsn
        if listen and config.transaction_pooler and not direct:
            # Through a transaction pooler the LISTEN lands on whichever server connection
            # the pooler picks, and notifications are silently lost.
            logger.warning(
                "pgqueue: connection %r goes through a transaction pooler and has no listen_dsn: "
                "LISTEN is off and the worker polls every %.1fs; set listen_dsn to a direct "
                "connection to PostgreSQL for instant wake-ups", config.name, poll_interval)
            listen = False
        self.listen = listen
        # LISTEN on the database this connection's jobs are enqueued in: its own DSN when it
        # has one, else the default one.
        self.listen_dsn = direct or config.dsn or dsn
        self.stats = WorkerStats()
        if interval and config.transaction_pooler and not direct:
            # The VACUUM holds a session advisory lock, which a transaction pooler does not keep.
            logger.warning(
                "pgqueue: connection %r goes through a transaction pooler and has no listen_dsn: table "
                "maintenance (VACUUM of pgqueue.jobs when autovacuum does not keep up) is off; set listen_dsn "
                "to a direct connection to PostgreSQL to turn it on", config.name)
            interval = 0.0
        #: The table maintenance (None with ``maintenance_interval`` None or 0).
        self.maintenance: Maintenance | None = None
        if interval:
            # The VACUUM's own connection: the pool's database, or the direct one behind a pooler.
            vacuum_dsn = direct if config.transaction_pooler and direct else config.dsn or dsn
            self.maintenance = Maintenance(self.pool, vacuum_dsn, interval=interval, grace=grace,
                                           vacuumed=self._vacuumed)
        self.completer = Completer(self.pool, flush_interval=ack_flush_interval, batch_size=ack_batch_size,
                                   on_refused=self._ack_refused)
        self._settler = _Settler(self)
        self._wakeup = asyncio.Event()
        #: Set while the worker sleeps with nothing to reserve (until notified, the next job
        #: is due or the poll interval ends); cleared when it wakes. For tests and health checks.
        self.idle = asyncio.Event()
        #: The LISTEN connection's notifier (None with ``listen=False``); ``notifier.connected``
        #: is set while it listens.
        self.notifier: Notifier | None = (
            Notifier(self.listen_dsn, self.queues, self.wake, self._reschedule) if listen else None
        )
        self._rescheduled = asyncio.Event()
        self._slot_free = asyncio.Event()
        self._stopping = False
        self._cancel_running = False
        self._running: set[asyncio.Task[bool]] = set()

    # ---------------------------------------------------------------- control
    def wake(self) -> None:
        """Make the worker look for jobs now (called on NOTIFY)."""
        self.idle.clear()
        self._wakeup.set()

    def _vacuumed(self) -> None:
        self.stats.vacuums += 1

    def _ack_refused(self, job_id: uuid.UUID) -> None:
        # Counted as succeeded when the handler returned; the fence says someone else holds it now.
        self.stats.succeeded -= 1
        self.stats.lost += 1

    def _reschedule(self) -> None:
        """A delayed job was enqueued: an idle worker re-reads the next due time."""
        self._rescheduled.set()

    def stop(self, *, cancel_running: bool = False) -> None:
        """Stop reserving; running handlers finish (within drain_timeout). ``cancel_running``
        cancels them now instead, releasing their reservations where possible."""
        self._stopping = True
        if cancel_running:
            self._cancel_running = True
            for task in list(self._running):
                task.cancel()
        self._wakeup.set()
        self._slot_free.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM: the first stops gracefully, the second cancels running handlers."""
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if self._stopping:
                logger.warning("pgqueue: second %s: cancelling %d running handlers",
                               signal.Signals(signum).name, len(self._running))
                self.stop(cancel_running=True)
            else:
                logger.info("pgqueue: %s: finishing %d running handlers, then stopping",
                            signal.Signals(signum).name, len(self._running))
                self.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)

    # -------------------------------------------------------------------- run
    async def run(self, *, stop_when_empty: bool = False, max_jobs: int | None = None) -> int:
        """Process jobs until stopped; returns the number of reservations processed.

        ``stop_when_empty``: return once no job is ready now (delayed jobs may remain).
        ``max_jobs``: return after that many reservations (failed attempts and retries count).
        Cancelling ``run()`` stops the worker gracefully, like :meth:`stop`, then re-raises.
        """
        if max_jobs is not None and max_jobs < 1:
            raise QueueConfigurationError(f"max_jobs must be >= 1, got {max_jobs!r}")
        completer_task = asyncio.create_task(self.completer.run(), name="pgqueue-completer")
        notifier_task: asyncio.Task[None] | None = None
        if self.notifier is not None:
            notifier_task = asyncio.create_task(self.notifier.run(), name="pgqueue-notifier")
        maintenance_task: asyncio.Task[None] | None = None
        if self.maintenance is not None:
            maintenance_task = asyncio.create_task(self.maintenance.run(), name="pgqueue-maintenance")
        heartbeat_task: asyncio.Task[None] | None = None
        if self.heartbeat is not None:
            heartbeat_task = asyncio.create_task(self.heartbeat.run(), name="pgqueue-heartbeat")
        scheduler_task = asyncio.create_task(self.scheduler.run(), name="pgqueue-scheduler")
        cancelled = False
        try:
            await self._warn_about_unknown_queues()
            await self._fetch_loop(stop_when_empty, max_jobs)
        except asyncio.CancelledError:
            cancelled = True
            self.stop()
        finally:
            scheduler_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scheduler_task
            if maintenance_task is not None:
                # A VACUUM in progress is cancelled on the server; its connection closes.
                maintenance_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await maintenance_task
            await self._drain()
            if heartbeat_task is not None and self.heartbeat is not None:
                await self.heartbeat.stop(heartbeat_task)
            if self._thread_pool is not None:
                # Threads still running a handler that ignored ``context.cancelled`` are left to
                # finish; nothing waits for them here.
                self._thread_pool.shutdown(wait=False, cancel_futures=True)
                self._thread_pool = None
            if notifier_task is not None:
                notifier_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await notifier_task
            await self.completer.wait_idle()
            completer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await completer_task
        if cancelled:
            raise asyncio.CancelledError
        return self.stats.processed

    async def _warn_about_unknown_queues(self) -> None:
        """Warn once when a served queue has no job and no failure: often a misspelt name."""
        try:
            known = await self.store.served_queues()
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            logger.debug("pgqueue: could not list the queues in use (%s)", exc)
            return
        unknown = [q for q in self.queues if q not in known]
        if unknown:
            shown = ", ".join(repr(q) for q in known[:20]) + (", ..." if len(known) > 20 else "")
            logger.warning(
                "pgqueue: no job or failure was found in queue(s) %s, which this worker serves: check the "
                "name (queues with jobs or failures: %s); the worker runs jobs dispatched there from now on",
                ", ".join(repr(q) for q in unknown), shown or "none")

    async def _fetch_loop(self, stop_when_empty: bool, max_jobs: int | None) -> None:
        backoff = 0.05
        while not self._stopping:
            free = self.concurrency - len(self._running)
            if max_jobs is not None:
                free = min(free, max_jobs - self.stats.reserved)
                if free <= 0 and self.stats.reserved >= max_jobs:
                    return
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            self._wakeup.clear()
            try:
                rows = await self._reserve_shielded(free)
            except Exception as exc:
                if is_transient(exc):
                    logger.warning("pgqueue: reserving failed (%s); retrying in %.2fs", exc, backoff)
                elif isinstance(exc, psycopg.Error) and (exc.sqlstate or "")[:2] not in ("42", "3F"):
                    # Data-dependent refusals (a trigger, a full disk refusing the failure record of an
                    # expired final attempt) must not kill the worker: keep trying with backoff.
                    logger.error("pgqueue: reserving failed (%s: %s); retrying in %.2fs",
                                 type(exc).__name__, exc, backoff)
                elif isinstance(exc, psycopg.Error):
                    # Not migrated, no privilege (SQLSTATE 42xxx/3Fxxx): configuration, not a passing fault.
                    raise translate(exc, "reserving jobs") from exc
                else:
                    raise
                await self._sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.05
            for row in rows:
                self._start(row)
            if len(rows) == free:
                await self._gather_slots()
                continue
            if stop_when_empty:
                if self._running:
                    # A running handler may release its job for an immediate retry.
                    self._slot_free.clear()
                    await self._slot_free.wait()
                    continue
                if not rows:
                    return
                continue
            await self._idle_wait()

    async def _gather_slots(self) -> None:
        """After a full batch (more work is likely waiting), let slots free up so the next
        reservation is a batch too: wait until half the slots are free, or at most
        ``fetch_cooldown`` once at least one is."""
        loop = asyncio.get_running_loop()
        target = max(1, self.concurrency // 2)
        deadline = loop.time() + self.fetch_cooldown
        while not self._stopping:
            free = self.concurrency - len(self._running)
            if free >= target:
                return
            if free > 0:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return
                self._slot_free.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._slot_free.wait(), remaining)
            else:
                self._slot_free.clear()
                await self._slot_free.wait()

    async def _reserve_shielded(self, limit: int) -> list[Any]:
        """Reserve; if ``run()`` is cancelled meanwhile, hand back what the database granted."""
        pending = asyncio.ensure_future(self._reserve(limit))
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                rows = await pending
                if rows:
                    async with self.pool.connection() as conn:
                        await conn.execute(query("release_unstarted"),
                                           ([r[0] for r in rows], [r[1] for r in rows]))
            raise

    async def _reserve(self, limit: int) -> list[Any]:
        """Reserve up to ``limit`` jobs; pending acks ride along in the same transaction
        (one round trip in pipeline mode, one commit for both)."""
        ids, tokens = self.completer.take()
        if not ids:
            async with self.pool.connection() as conn:
                cur = await conn.execute(query("reserve"), (self.queues, limit, self.lease))
                rows: list[Any] = await cur.fetchall()
                return rows
        try:
            async with self.pool.connection() as conn:
                async with conn.pipeline(), conn.transaction():
                    acked = await conn.execute(query("ack"), (ids, tokens))
                    cur = await conn.execute(query("reserve"), (self.queues, limit, self.lease))
                refused = await acked.fetchall()
                rows = await cur.fetchall()
        except BaseException:
            self.completer.give_back(ids, tokens)
            raise
        self.completer.settled(ids, refused)
        return rows

    async def _next_due(self) -> float | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(query("next_due"), (self.queues,))
            row = await cur.fetchone()
        return None if row is None or row[0] is None else float(row[0])

    async def _idle_wait(self) -> None:
        """Sleep until notified, until the next job is due, or for the poll interval at most."""
        loop = asyncio.get_running_loop()
        poll_deadline = loop.time() + self.poll_interval
        while not self._wakeup.is_set():
            self._rescheduled.clear()
            try:
                due = await self._next_due()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                logger.warning("pgqueue: reading the next due time failed (%s)", exc)
                due = None
            cap = poll_deadline - loop.time()
            wait = cap if due is None else min(due, cap)
            if wait <= 0 or self._wakeup.is_set():
                if due is not None and due <= 0:
                    # Due now yet not reserved: locked by another worker's reservation in
                    # flight. Yield briefly instead of spinning on the database.
                    await self._sleep(0.001)
                return
            self.idle.set()
            try:
                if not await self._sleep_until_rescheduled(wait):
                    return  # woken, due, or the poll interval is over: reserve
            finally:
                self.idle.clear()

    async def _sleep_until_rescheduled(self, seconds: float) -> bool:
        """Sleep; True if a delayed job was enqueued meanwhile (and nothing else woke us)."""
        wakeup = asyncio.ensure_future(self._wakeup.wait())
        rescheduled = asyncio.ensure_future(self._rescheduled.wait())
        try:
            await asyncio.wait((wakeup, rescheduled), timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wakeup.cancel()
            rescheduled.cancel()
        return self._rescheduled.is_set() and not self._wakeup.is_set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), seconds)

    def _start(self, row: Any) -> None:
        self.stats.reserved += 1
        task = asyncio.create_task(self._execute(row))
        self._running.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[bool]) -> None:
        self._running.discard(task)
        self._slot_free.set()
        if task.cancelled():
            self.stats.processed += 1
        elif task.exception() is not None:
            self.stats.processed += 1
            logger.error("pgqueue: internal error while executing a job", exc_info=task.exception())
        elif task.result():
            self.stats.processed += 1

    async def _drain(self) -> None:
        if not self._running:
            return
        _, pending = await asyncio.wait(set(self._running), timeout=self.drain_timeout)
        if pending:
            logger.warning("pgqueue: %d handlers still running after the %.1fs drain timeout; cancelling them",
                           len(pending), self.drain_timeout)
            self._cancel_running = True
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=10)

    # ---------------------------------------------------------------- execute
    async def _execute(self, row: Any) -> bool:
        """Run one reservation to its end; False if it was handed back unstarted (stopping)."""
        job_id, token, attempts, max_tries, lease_left, queue_name, raw = row
        received = time.monotonic()
        if self._stopping:
            await self._release_unstarted(job_id, token)
            return False
        try:
            # Decoding and validation happen here, per row: whatever one stored envelope
            # contains fails that job alone, never the fetch of its batch.
            envelope = Envelope.decode(raw, job_id=job_id)
        except QueuePayloadError as exc:
            await self._fail(job_id, token, attempts, exc, "payload_invalid", name="?")
            return True
        job_type = lookup(envelope.name)
        if job_type is None:
            error = QueuePayloadError(
                f"job name {envelope.name!r} is not registered in this worker; import the module that "
                "defines it (--app) — the job was not run"
            )
            await self._fail(job_id, token, attempts, error, "unknown_job", name=envelope.name)
            return True
        try:
            job = job_type.from_args(envelope.args)
        except Exception as exc:
            error = QueuePayloadError(f"job {envelope.name!r}: args {envelope.args!r:.500} do not fit the job: "
                                      f"{exc}")
            await self._fail(job_id, token, attempts, error, "payload_invalid", name=envelope.name)
            return True
        context = JobContext(job_id=job_id, token=token, attempts=attempts, max_tries=max_tries,
                             queue=queue_name, connection=envelope.connection,
                             lease_seconds_left=lease_left - (time.monotonic() - received), settler=self._settler)
        timeout = envelope.timeout if self.timeout_cap is None else min(envelope.timeout, self.timeout_cap)
        loop = asyncio.get_running_loop()
        started = loop.time()
        job_deadline = started + timeout
        margin = self.config.lease_margin

        def limit() -> float:
            """When the handler must stop: its timeout, or ``margin`` before its lease ends."""
            if context.cancelled:
                return loop.time()
            return min(job_deadline, loop.time() + context.lease_expires_in - margin)

        deadline = asyncio.timeout(None)

        def lease_moved() -> None:
            with contextlib.suppress(RuntimeError):  # not entered yet, or already expiring
                deadline.reschedule(limit())

        context._lease_listener = lease_moved
        if self.heartbeat is not None:
            self.heartbeat.hold(context)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("pgqueue: running %s %s attempt %d/%d", envelope.name, job_id, attempts, max_tries)
        try:
            if limit() <= loop.time():
                raise TimeoutError(f"job {job_id}: no time left in its lease to run (lease margin "
                                   f"{margin:g}s)")
            if self.scope is None:
                async with deadline:
                    deadline.reschedule(limit())
                    await self._handle(job, context)
            else:
                async with self.scope(context), deadline:
                    deadline.reschedule(limit())
                    await self._handle(job, context)
        except TimeoutError as raised:
            timed_out: Exception = raised
            if deadline.expired():
                context._cancelled = True
                if context.decision == "lost":
                    # The heartbeat's renewal was refused: someone else holds the job now.
                    self.stats.lost += 1
                    return True
                when = deadline.when()
                if self.heartbeat is not None and when is not None and when < job_deadline:
                    context._settle_internally("lost")
                    self.stats.lost += 1
                    logger.warning(
                        "pgqueue: job %s (%s) attempt %d: its lease could not be renewed, so the handler was "
                        "stopped %gs before the lease ends; the job runs again once the lease has expired",
                        job_id, envelope.name, attempts, margin)
                    return True
                timed_out = TimeoutError(
                    f"job {envelope.name!r} timed out after {loop.time() - started:.3g}s "
                    f"(its timeout is {envelope.timeout:g}s; the limit is also kept {margin:g}s inside the "
                    "lease); the handler was cancelled at an await"
                    + (" (a sync handler's thread runs on until it returns)" if has_sync_handle(job_type) else "")
                )
            await self._after_exception(context, envelope, timed_out)
        except asyncio.CancelledError:
            context._cancelled = True
            # Cancelled by a forced stop: hand the job back for another worker.
            if self._cancel_running and context._settle_internally("released"):
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._settler.release(job_id, token, 0.0))
                logger.warning("pgqueue: job %s (%s) cancelled by shutdown and released", job_id, envelope.name)
            raise
        except QueueLeaseError as exc:
            if context.finished and context.decision == "lost":
                self.stats.lost += 1
                logger.warning("pgqueue: %s", exc)
                return True
            await self._after_exception(context, envelope, exc)
        except Exception as exc:
            await self._after_exception(context, envelope, exc)
        else:
            if context._settle_internally("acked"):
                self.completer.add(job_id, token)
                self.stats.succeeded += 1
            elif context.decision == "failed":
                self.stats.failed += 1
            elif context.decision == "lost":
                self.stats.lost += 1
            else:
                self.stats.succeeded += 1
        finally:
            context._lease_listener = None
            if self.heartbeat is not None:
                self.heartbeat.drop(context)
        return True

    def _handle(self, job: Job, context: JobContext) -> Awaitable[Any]:
        """The handler's run: the coroutine of an async ``handle``, or a sync one in the thread pool."""
        if not has_sync_handle(type(job)):
            return job.handle(context)
        if self._thread_pool is None:
            self._thread_pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="pgqueue-handler")
        loop = asyncio.get_running_loop()
        facade = SyncJobContext(context, loop)
        # The handler sees the context variables of its execution (scope), as an async one would.
        handle: Callable[[SyncJobContext], Any] = job.handle  # type: ignore[assignment]  # sync, checked above
        return loop.run_in_executor(self._thread_pool, contextvars.copy_context().run, handle, facade)

    async def _after_exception(self, context: JobContext, envelope: Envelope, error: Exception) -> None:
        """A handler raised (or timed out): retry with backoff while tries and the deadline allow."""
        if context.finished:
            logger.warning("pgqueue: job %s (%s) raised after it was %s: %r", context.id, envelope.name,
                           context.decision, error)
            return
        attempts = context.attempts
        if attempts < context.max_tries:
            delay = envelope.backoff.delay(attempts)
            if envelope.retry_until is None or time.time() + delay <= envelope.retry_until:
                context._settle_internally("released")
                try:
                    accepted = await self._settler.release(context.id, context.token, delay)
                except (psycopg.Error, PoolTimeout, OSError) as exc:
                    logger.error("pgqueue: could not release job %s for a retry (%s); it will be retried "
                                 "when its lease expires", context.id, exc)
                    return
                if accepted:
                    self.stats.retried += 1
                    logger.warning("pgqueue: job %s (%s) attempt %d/%d failed: %s: %s; retrying in %.2fs",
                                   context.id, envelope.name, attempts, context.max_tries,
                                   type(error).__name__, error, delay)
                else:
                    self.stats.lost += 1
                    logger.warning("pgqueue: job %s attempt %d failed and its lease was already lost",
                                   context.id, attempts)
                return
        context._settle_internally("failed")
        await self._fail(context.id, context.token, attempts, error, "exception", name=envelope.name)

    async def _fail(self, job_id: uuid.UUID, token: int, attempts: int, error: BaseException, reason: str,
                    *, name: str) -> None:
        exception, message, trace = describe(error)
        # Decided by the worker before any handler ran: the message says it all.
        stored_trace = None if isinstance(error, QueueError) and reason != "exception" else trace
        try:
            accepted = await self._settler.fail(job_id, token, exception, message, stored_trace, reason)
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            logger.error("pgqueue: recording the failure of job %s (%s) failed (%s); the job stays reserved "
                         "and is recovered when its lease expires", job_id, name, exc)
            return
        if accepted:
            self.stats.failed += 1
            logger.error("pgqueue: job %s (%s) failed after %d attempt(s) [%s]: %s: %s", job_id, name,
                         attempts, reason, exception, message)
        else:
            self.stats.lost += 1
            logger.warning("pgqueue: job %s failed but its lease was already lost; nothing recorded", job_id)

    async def _release_unstarted(self, job_id: uuid.UUID, token: int) -> None:
        try:
            async with self.pool.connection() as conn:
                await conn.execute(query("release_unstarted"), ([job_id], [token]))
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            logger.warning("pgqueue: could not hand back unstarted job %s (%s); it returns when its lease "
                           "expires", job_id, exc)
