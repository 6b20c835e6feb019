"""The worker: options, lifecycle, signals and drain; it wires the rooms that do the work.

A job's path through a worker: ``fetcher.py`` reserves it (the pending acks riding along),
``executor.py`` runs it and takes the decision, ``completer.py`` acks it; ``heartbeat.py``
renews the leases of running handlers, ``notifier.py`` wakes the fetcher, ``maintenance.py``
vacuums ``pgqueue.jobs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgqueue.config import ConnectionConfig
from pgqueue.errors import QueueConfigurationError
from pgqueue.jobs import Job, registered_jobs
from pgqueue.limits import MAX_LEASE_SECONDS, MAX_SQL_INTEGER, MIN_LEASE_SECONDS, queue_name_problem
from pgqueue.store import Store
from pgqueue.worker.cancellation import Cancellations
from pgqueue.worker.completer import Completer
from pgqueue.worker.depth import DepthSampler
from pgqueue.worker.executor import Executor, Scope
from pgqueue.worker.fetcher import Fetcher
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.instruments import Instruments, Recorder
from pgqueue.worker.maintenance import HISTORY_RETENTION, Maintenance, check_seconds
from pgqueue.worker.notifier import Notifier
from pgqueue.worker.registry import Registry
from pgqueue.worker.scheduler import Scheduler, declared_schedules

logger = logging.getLogger("pgqueue.worker")

__all__ = ["Scope", "Worker", "WorkerStats", "default_prefetch"]


def default_prefetch(concurrency: int) -> int:
    """The default ``prefetch`` of a worker: ten times its concurrency, at least 50 and at most
    500 (measured: see the README's "Prefetch")."""
    return min(500, max(50, 10 * concurrency))


@dataclass
class WorkerStats:
    """What a worker did so far."""

    reserved: int = 0
    processed: int = 0
    acked: int = 0
    retried: int = 0
    failed: int = 0
    #: Reservations whose lease was lost: a decision or an ack the fence refused, or a handler
    #: stopped because its lease could not be renewed. Such a job runs again elsewhere.
    lost: int = 0
    #: VACUUMs of pgqueue.jobs run by this worker's table maintenance.
    vacuums: int = 0
    #: Handlers stopped because their job was cancelled (``pgqueue.cancel``, confirmed by the database).
    cancelled: int = 0
    #: Attempts the worker itself interrupted (a forced stop: drain timeout passed, second signal),
    #: handed back with their try (``pgqueue.release_interrupted``) to run again on the next worker.
    given_back: int = 0


class Worker:
    """Runs jobs of one connection's queues.

    Create with ``await client.worker("database", queues=("high", "default"), concurrency=4)``
    and call :meth:`run`. Queues are served in the order given: while ``high`` has ready
    jobs, ``default`` waits (a steady stream on ``high`` can starve ``default``).

    Options:
        concurrency: handlers running at once.
        poll_interval: the longest an idle worker sleeps without a notification (seconds);
            it normally sleeps until the next delayed job is due.
        drain_timeout: on stop, how long running handlers may take to finish.
        lease: how long a reservation lasts, in seconds (default: the connection's).
        timeout: cap on every job's timeout (default: none beyond the envelope's).
        scope: ``scope(context)`` returns an async context manager entered around each
            execution, for per-job resources (a database session, a tracing span, ...).
        ack_flush_interval / ack_batch_size: the completer's batching.
        listen: LISTEN for notifications (False: poll every ``poll_interval``). A notification is a
            hint: a wake-up makes the worker reserve (the reservation decides), a cancel stops a
            handler only once ``pgqueue.cancelled`` confirms it (see ``cancellation.py``).
        listen_dsn: where to LISTEN (default: the connection's listen_dsn, else its dsn).
        prefetch: jobs reserved beyond the free slots into a local buffer, so one reservation
            (one round trip, one commit) serves many more jobs than the slots that freed
            (default :func:`default_prefetch`: ``min(500, max(50, 10 * concurrency))``; 0: reserve
            only what the free slots take). A worker holds at most ``concurrency + prefetch``
            reservations; the buffer is refilled once it is down to half. Buffered jobs are
            leased: the heartbeat renews them, one whose lease is about to end or was lost is
            not started, a cancelled one is dropped, and on stop they are handed back unstarted
            (their attempt does not count). A paused queue's buffered jobs still run (at most
            ``prefetch``), and a newly dispatched job of higher priority waits behind them.
        fetch_cooldown: with ``prefetch=0`` and a backlog, how long to wait for more slots to
            free up so the next reservation is a batch rather than a single job (seconds).
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
            ``heartbeat``, on unless configured off). Every ``(lease - lease_margin) / 3``
            seconds one fenced statement renews all of them to ``lease`` from then, so a
            job may run as long as its ``timeout`` while ``lease`` only decides how soon a
            crashed worker's jobs run again. A handler whose lease cannot be renewed (database
            unreachable) is stopped ``lease_margin`` before its lease ends; one whose renewal
            the fence refuses (the lease was lost) is stopped at once; both count as ``lost``.
            Off: a handler's time limit is also ``lease_margin`` inside its lease, which only
            ``context.extend`` moves.
        threads: the thread pool that runs sync handlers (a plain ``def handle``), at most this
            many at once (default: ``min(concurrency, 32)``). A sync handler waiting for a
            thread holds one of the ``concurrency`` slots and its time limit runs.
        history_retention: how long the per-minute history ``pgqueue.job_stats`` is kept (seconds,
            default 7 days); the table maintenance prunes older rows in batches.
        keep_completed: keep a copy of each job this worker acks in ``pgqueue.completed_jobs``
            (args, attempts, timings), for this many seconds (default None: off). Written by the
            ack's own statement; pruned by the table maintenance.
        instruments: what the worker reports for metrics (:class:`pgqueue.worker.instruments.Instruments`;
            default: nothing). Pass a :class:`~pgqueue.worker.instruments.Recorder` and serve it with
            :func:`pgqueue.metrics.serve` (the ``metrics`` extra), as ``queue:work --metrics-port`` does.
        metrics_interval: with a Recorder, how often queue depths are sampled from the database
            (seconds, default 15; None or 0: never). One worker of the database samples (advisory
            lock ``depth.DEPTH_LOCK_KEY``, on its own direct connection); the others export no depth.
        schedules: enqueue the due ticks of periodic jobs (default True: those registered in this
            process whose connection is this one or unset; ``Client.worker`` passes the list that
            resolves to this connection; False: none). Every worker may: each tick is enqueued once.
    """

    def __init__(self, config: ConnectionConfig, store: Store, *, dsn: str,
                 queues: Sequence[str], concurrency: int = 10, poll_interval: float = 5.0,
                 drain_timeout: float = 30.0, lease: float | None = None, timeout: float | None = None,
                 scope: Scope | None = None, ack_flush_interval: float = 0.005, ack_batch_size: int = 500,
                 listen: bool = True, listen_dsn: str | None = None, fetch_cooldown: float = 0.002,
                 maintenance_interval: float | None = 2.0, vacuum_grace: float = 60.0,
                 heartbeat: bool | None = None, threads: int | None = None,
                 schedules: bool | Sequence[type[Job]] = True, prefetch: int | None = None,
                 history_retention: float = HISTORY_RETENTION, keep_completed: float | None = None,
                 instruments: Instruments | None = None, metrics_interval: float | None = 15.0) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise QueueConfigurationError(f"worker concurrency must be an integer >= 1, got {concurrency!r}")
        if isinstance(queues, str) or not queues:
            raise QueueConfigurationError(f"worker queues must be a non-empty list of queue names, got {queues!r}")
        for name in queues:
            problem = queue_name_problem(name)
            if problem is not None:  # no job can be on such a queue: the worker would idle forever
                raise QueueConfigurationError(f"worker queues: {problem}")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, int | float) \
                or not 0 < poll_interval < math.inf:
            raise QueueConfigurationError(f"poll_interval must be a finite number of seconds > 0, "
                                          f"got {poll_interval!r}")
        if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0):
            raise QueueConfigurationError(f"prefetch must be an integer >= 0 (or None: the default), got {prefetch!r}")
        # One reservation asks for up to concurrency + prefetch jobs, an SQL integer.
        ahead = default_prefetch(concurrency) if prefetch is None else prefetch
        if concurrency + ahead > MAX_SQL_INTEGER:
            raise QueueConfigurationError(f"worker concurrency ({concurrency}) plus prefetch ({ahead}) must be at "
                                          f"most {MAX_SQL_INTEGER}, the most jobs one reservation can ask for")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise QueueConfigurationError(f"threads must be an integer >= 1 (or None: min(concurrency, 32)), "
                                          f"got {threads!r}")
        interval = 0.0 if maintenance_interval is None else check_seconds(
            maintenance_interval, "maintenance_interval", " (None or 0: no table maintenance)")
        grace = check_seconds(vacuum_grace, "vacuum_grace")
        history_retention = check_seconds(history_retention, "history_retention")
        if keep_completed is not None:
            keep_completed = check_seconds(keep_completed, "keep_completed", " (None: off)")
        self.config = config
        self.store = store
        self.pool: AsyncConnectionPool[Any] = store.pool
        self.queues = list(dict.fromkeys(queues))
        self.concurrency = concurrency
        #: Jobs reserved ahead of the free slots (see the ``prefetch`` option).
        self.prefetch = default_prefetch(concurrency) if prefetch is None else prefetch
        self.poll_interval = float(poll_interval)
        self.drain_timeout = float(drain_timeout)
        self.lease = float(lease if lease is not None else config.lease)
        if not MIN_LEASE_SECONDS <= self.lease <= MAX_LEASE_SECONDS:  # NaN too: pgqueue.reserve would refuse it
            raise QueueConfigurationError(f"lease must be from {MIN_LEASE_SECONDS:g} to {MAX_LEASE_SECONDS:.0f} "
                                          f"seconds (1 year), got {self.lease!r}")
        if self.lease <= config.lease_margin:
            raise QueueConfigurationError(
                f"lease ({self.lease}s) must exceed the lease margin ({config.lease_margin}s)"
            )
        #: The lease heartbeat (None when off).
        self.heartbeat: Heartbeat | None = None
        #: This worker's row of pgqueue.workers (issue 29), refreshed by the heartbeat (or on its own when off).
        self.registry = Registry(self.store, queues=self.queues, concurrency=concurrency, prefetch=self.prefetch,
                                 period=(self.lease - config.lease_margin) / 3)
        if config.heartbeat if heartbeat is None else heartbeat:
            self.heartbeat = Heartbeat(self.store, lease=self.lease, period=(self.lease - config.lease_margin) / 3,
                                       registry=self.registry)
        elif config.heartbeat:
            logger.info("pgqueue: lease heartbeat off on connection %r, whose jobs may have timeouts longer than "
                        "the lease: a handler that does not call context.extend() is stopped %gs before its "
                        "%gs lease ends", config.name, config.lease_margin, self.lease)
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
        vacuum = True
        if interval and config.transaction_pooler and not direct:
            # The VACUUM holds a session advisory lock, which a transaction pooler does not keep.
            logger.warning(
                "pgqueue: connection %r goes through a transaction pooler and has no listen_dsn: table "
                "maintenance (VACUUM of pgqueue.jobs when autovacuum does not keep up) is off; set listen_dsn "
                "to a direct connection to PostgreSQL to turn it on", config.name)
            vacuum = False
        #: The table maintenance (None with ``maintenance_interval`` None or 0).
        self.maintenance: Maintenance | None = None
        if interval:
            # The VACUUM's own connection: the pool's database, or the direct one behind a pooler.
            vacuum_dsn = direct if config.transaction_pooler and direct else config.dsn or dsn
            self.maintenance = Maintenance(self.store, vacuum_dsn if vacuum else None, interval=interval,
                                           grace=grace, vacuumed=self._vacuumed,
                                           history_retention=history_retention,
                                           completed_retention=keep_completed)
        #: The rooms: the completer owns every ack, the executor runs a reservation, the fetcher
        #: reserves and starts executions.
        #: What the worker reports for metrics (the default does nothing).
        self.instruments = instruments or Instruments()
        self.completer = Completer(self.store, flush_interval=ack_flush_interval, batch_size=ack_batch_size,
                                   on_refused=self._ack_refused, keep_completed=keep_completed is not None,
                                   instruments=self.instruments)
        #: The queue depth sampler (None unless ``instruments`` is a Recorder and ``metrics_interval`` is set).
        self.depth_sampler: DepthSampler | None = None
        if isinstance(self.instruments, Recorder):
            self.instruments.acks_pending = lambda: self.completer.pending
            who = self.registry.identity
            self.instruments.worker = {
                "worker_id": str(who.id), "host": who.host, "pid": str(who.pid), "version": who.version,
                "queues": ",".join(who.queues), "concurrency": str(who.concurrency), "prefetch": str(who.prefetch)}
            sample_every = 0.0 if metrics_interval is None else check_seconds(
                metrics_interval, "metrics_interval", " (None or 0: no queue depth sampling)")
            if sample_every:
                self.depth_sampler = DepthSampler(direct or config.dsn or dsn, self.instruments,
                                                  interval=sample_every)
        #: The running handlers by job id, for cancellations (``pgqueue.cancel``), each checked
        #: with the database before it stops anything.
        self.cancellations = Cancellations(self.store)
        self.executor = Executor(self.store, self.completer, self.stats, lease_margin=config.lease_margin,
                                 timeout_cap=timeout, scope=scope, heartbeat=self.heartbeat,
                                 threads=threads if threads is not None else min(concurrency, 32),
                                 cancellations=self.cancellations, instruments=self.instruments)
        #: The periodic-job scheduler (issue 13): enqueues the due ticks of these schedules.
        scheduled = list(registered_jobs().values()) if schedules is True else list(schedules or ())
        self.scheduler = Scheduler(self.store, config, declared_schedules(scheduled, config.name))
        self.fetcher = Fetcher(self.store, self.completer, self.executor, self.stats, queues=self.queues,
                               lease=self.lease, concurrency=concurrency, poll_interval=self.poll_interval,
                               fetch_cooldown=float(fetch_cooldown), prefetch=self.prefetch,
                               heartbeat=self.heartbeat, instruments=self.instruments)
        self.cancellations.buffered = self.fetcher.buffered_job
        #: Set while the worker sleeps with nothing to reserve (until notified, the next job
        #: is due or the poll interval ends); cleared when it wakes. For tests and health checks.
        self.idle = self.fetcher.idle
        #: The LISTEN connection's notifier (None with ``listen=False``); ``notifier.connected``
        #: is set while it listens.
        self.notifier: Notifier | None = (
            Notifier(self.listen_dsn, self.queues, self.fetcher.wake, self.fetcher.reschedule,
                     self.cancellations.notified) if listen else None
        )
        self._stopping = False

    # ---------------------------------------------------------------- control
    def wake(self) -> None:
        """Make the worker look for jobs now (called on NOTIFY)."""
        self.fetcher.wake()

    def _vacuumed(self) -> None:
        self.stats.vacuums += 1

    def _ack_refused(self, job_id: uuid.UUID) -> None:
        # Counted as acked when the handler returned; the fence says someone else holds it now.
        self.stats.acked -= 1
        self.stats.lost += 1
        self.instruments.lease_lost()

    def stop(self, *, cancel_running: bool = False) -> None:
        """Stop reserving; running handlers finish (within drain_timeout). ``cancel_running``
        cancels them now instead, giving their jobs back with their try where possible (the
        attempt does not count: the worker, not the handler, ended it)."""
        self._stopping = True
        self.executor.stopping = True
        if cancel_running:
            for task in list(self.fetcher.running):
                task.cancel()
        self.fetcher.stop()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM: the first stops gracefully, the second cancels running handlers (their
        jobs are given back with their try). Installed on the event loop, so a signal never raises
        KeyboardInterrupt in a handler: one a handler raises is that attempt's failure."""
        loop = asyncio.get_running_loop()
        self.executor.signals_installed = True

        def on_signal(signum: int) -> None:
            if self._stopping:
                logger.warning("pgqueue: second %s: cancelling %d running handlers",
                               signal.Signals(signum).name, len(self.fetcher.running))
                self.stop(cancel_running=True)
            else:
                logger.info("pgqueue: %s: finishing %d running handlers, then stopping",
                            signal.Signals(signum).name, len(self.fetcher.running))
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
        # Before any task starts, so that a cancellation here leaves nothing running (never raises).
        await self.registry.register()
        completer_task = asyncio.create_task(self.completer.run(), name="pgqueue-completer")
        notifier_task: asyncio.Task[None] | None = None
        cancellations_task: asyncio.Task[None] | None = None
        if self.notifier is not None:
            notifier_task = asyncio.create_task(self.notifier.run(), name="pgqueue-notifier")
            cancellations_task = asyncio.create_task(self.cancellations.run(), name="pgqueue-cancellations")
        maintenance_task: asyncio.Task[None] | None = None
        if self.maintenance is not None:
            maintenance_task = asyncio.create_task(self.maintenance.run(), name="pgqueue-maintenance")
        heartbeat_task: asyncio.Task[None] | None = None
        if self.heartbeat is not None:
            heartbeat_task = asyncio.create_task(self.heartbeat.run(), name="pgqueue-heartbeat")
        else:
            heartbeat_task = asyncio.create_task(self.registry.run(), name="pgqueue-registry")
        scheduler_task = asyncio.create_task(self.scheduler.run(), name="pgqueue-scheduler")
        depth_task: asyncio.Task[None] | None = None
        if self.depth_sampler is not None:
            depth_task = asyncio.create_task(self.depth_sampler.run(), name="pgqueue-depth-sampler")
        cancelled = False
        try:
            await self._warn_about_unknown_queues()
            await self.fetcher.run(stop_when_empty, max_jobs)
        except asyncio.CancelledError:
            cancelled = True
            self.stop()
        finally:
            scheduler_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scheduler_task
            if depth_task is not None:
                depth_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await depth_task
            if maintenance_task is not None:
                # A VACUUM in progress is cancelled on the server; its connection closes.
                maintenance_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await maintenance_task
            await self._drain()
            if heartbeat_task is not None and self.heartbeat is not None:
                await self.heartbeat.stop(heartbeat_task)
            elif heartbeat_task is not None:
                heartbeat_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat_task
            await self.registry.deregister()
            # Threads still running a handler that ignored ``context.cancelled`` are left to
            # finish; nothing waits for them here.
            self.executor.shutdown()
            for listening in (notifier_task, cancellations_task):
                if listening is not None:
                    listening.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await listening
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

    async def _drain(self) -> None:
        running = self.fetcher.running
        if not running:
            return
        _, pending = await asyncio.wait(set(running), timeout=self.drain_timeout)
        if pending:
            logger.warning("pgqueue: %d handlers still running after the %.1fs drain timeout; cancelling them "
                           "(their jobs are given back with their try)", len(pending), self.drain_timeout)
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=10)
