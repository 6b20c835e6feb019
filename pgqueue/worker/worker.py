"""The worker: lifecycle, signals and drain; it wires the rooms that do the work.

A job's path through a worker: ``fetcher.py`` reserves it (the pending acks riding along),
``executor.py`` runs it and takes the decision, ``completer.py`` acks it, ``outcomes.py`` tells
the stats, the instruments and the log how each attempt ended; ``heartbeat.py`` renews the leases
of running handlers, ``notifier.py`` wakes the fetcher, ``maintenance.py`` vacuums
``pgqueue.jobs``. What a worker is told is :class:`~pgqueue.worker.options.WorkerOptions`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Any, Unpack

from psycopg_pool import AsyncConnectionPool

from pgqueue.config import ConnectionConfig
from pgqueue.errors import QueueConfigurationError
from pgqueue.jobs import Job, registered_jobs
from pgqueue.store import Store
from pgqueue.store.errors import DATABASE_ERRORS
from pgqueue.worker.cancellation import Cancellations
from pgqueue.worker.completer import Completer
from pgqueue.worker.depth import DepthSampler
from pgqueue.worker.executor import Executor, Scope
from pgqueue.worker.fetcher import Fetcher
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.instruments import Instruments, Recorder
from pgqueue.worker.maintenance import Maintenance
from pgqueue.worker.notifier import Notifier
from pgqueue.worker.options import WorkerKeywords, WorkerOptions, default_prefetch, sessions
from pgqueue.worker.outcomes import Outcomes, WorkerStats, log, reporter
from pgqueue.worker.registry import Registry
from pgqueue.worker.scheduler import Scheduler, declared_schedules
from pgqueue.worker.services import Services, watch_stop

logger = logging.getLogger("pgqueue.worker")

__all__ = ["Scope", "Worker", "WorkerOptions", "WorkerStats", "default_prefetch"]


class Worker:
    """Runs jobs of one connection's queues.

    Create with ``await client.worker("database", queues=("high", "default"), concurrency=4)``
    (or ``client.worker("database", WorkerOptions(...))``) and call :meth:`run`. The options are
    :class:`~pgqueue.worker.options.WorkerOptions`' fields, documented there; ``keywords`` replace
    fields of ``options``.
    """

    def __init__(self, config: ConnectionConfig, store: Store, options: WorkerOptions | None = None, *,
                 dsn: str, **keywords: Unpack[WorkerKeywords]) -> None:
        options = WorkerOptions.of(options, **keywords) if keywords or options is None else options
        #: What this worker was told (validated).
        self.options = options
        self.config = config
        self.store = store
        self.pool: AsyncConnectionPool[Any] = store.pool
        self.queues = list(options.queues or (config.queue,))
        self.concurrency = options.concurrency
        #: Jobs reserved ahead of the free slots (see the ``prefetch`` option).
        self.prefetch = options.ahead
        self.poll_interval = float(options.poll_interval)
        self.drain_timeout = options.drain_timeout
        self.lease = self._lease(options.lease)
        #: This worker's row of pgqueue.workers, refreshed by the heartbeat (or on its own when off).
        self.registry = self._registry()
        #: The lease heartbeat (None when off).
        self.heartbeat = self._heartbeat(options.heartbeat)
        where = sessions(config, options, dsn)
        self.listen, self.listen_dsn = where.listen, where.direct_dsn
        self.stats = WorkerStats()
        #: What the worker reports for metrics (the default does nothing).
        self.instruments = options.instruments or Instruments()
        #: Where each attempt's one outcome goes: the stats, the instruments and the log hear it.
        self.outcomes = Outcomes(self.stats.count, log)
        if type(self.instruments) is not Instruments:  # the default records nothing: not called at all
            self.outcomes.subscribe(reporter(self.instruments))
        #: The rooms: the completer owns every ack, the executor runs one, the fetcher reserves.
        self.completer = Completer(self.store, flush_interval=options.ack_flush_interval,
                                   batch_size=options.ack_batch_size, outcomes=self.outcomes,
                                   keep_completed=options.keep_completed is not None, instruments=self.instruments)
        #: The table maintenance (None with ``maintenance_interval`` None or 0).
        self.maintenance = self._maintenance(where.vacuum_dsn)
        #: The queue depth sampler (None unless ``instruments`` is a Recorder and ``metrics_interval`` is set).
        self.depth_sampler = self._depth_sampler(where.direct_dsn)
        #: The running handlers by job id, for cancellations (``pgqueue.cancel``), each checked
        #: with the database before it stops anything.
        self.cancellations = Cancellations(self.store)
        self.executor = Executor(self.store, self.completer, self.outcomes, lease_margin=config.lease_margin,
                                 timeout_cap=options.timeout, scope=options.scope, heartbeat=self.heartbeat,
                                 threads=options.threads or min(self.concurrency, 32),
                                 cancellations=self.cancellations, instruments=self.instruments, config=config)
        #: The periodic-job scheduler (issue 13): enqueues the due ticks of these schedules.
        self.scheduler = self._scheduler(options.schedules)
        self.fetcher = Fetcher(self.store, self.completer, self.executor, self.stats, queues=self.queues,
                               lease=self.lease, concurrency=self.concurrency, poll_interval=self.poll_interval,
                               fetch_cooldown=options.fetch_cooldown, prefetch=self.prefetch,
                               heartbeat=self.heartbeat, instruments=self.instruments)
        self.cancellations.buffered = self.fetcher.buffered_job
        #: Set while the worker sleeps with nothing to reserve (until notified, the next job
        #: is due or the poll interval ends); cleared when it wakes. For tests and health checks.
        self.idle = self.fetcher.idle
        #: The LISTEN connection's notifier (None with ``listen=False``); ``notifier.connected``
        #: is set while it listens.
        self.notifier: Notifier | None = (
            Notifier(self.listen_dsn, self.queues, self.fetcher.wake, self.fetcher.reschedule,
                     self.cancellations.notified) if self.listen else None
        )
        self._stopping = False

    def _lease(self, wanted: float | None) -> float:
        """The lease of this worker's reservations (``wanted`` None: the connection's)."""
        lease = float(wanted if wanted is not None else self.config.lease)
        if lease <= self.config.lease_margin:
            raise QueueConfigurationError(f"lease ({lease}s) must exceed the lease margin "
                                          f"({self.config.lease_margin}s)")
        return lease

    def _scheduler(self, schedules: bool | Sequence[type[Job]]) -> Scheduler:
        scheduled = list(registered_jobs().values()) if schedules is True else list(schedules or ())
        return Scheduler(self.store, self.config, declared_schedules(scheduled, self.config.name))

    def _maintenance(self, vacuum_dsn: str | None) -> Maintenance | None:
        options = self.options
        if not options.maintenance_interval:
            return None
        return Maintenance(self.store, vacuum_dsn, interval=options.maintenance_interval, grace=options.vacuum_grace,
                           vacuumed=self._vacuumed, history_retention=options.history_retention,
                           completed_retention=options.keep_completed)

    def _depth_sampler(self, direct_dsn: str) -> DepthSampler | None:
        if not isinstance(self.instruments, Recorder):
            return None
        self.instruments.acks_pending = lambda: self.completer.pending
        self.instruments.in_flight = lambda: self.fetcher.in_flight()  # noqa: PLW0108  # the fetcher comes later
        who = self.registry.identity
        self.instruments.worker = {
            "worker_id": str(who.id), "host": who.host, "pid": str(who.pid), "version": who.version,
            "queues": ",".join(who.queues), "concurrency": str(who.concurrency), "prefetch": str(who.prefetch)}
        if not self.options.metrics_interval:
            return None
        return DepthSampler(direct_dsn, self.instruments, interval=self.options.metrics_interval)

    def _registry(self) -> Registry:
        return Registry(self.store, queues=self.queues, concurrency=self.concurrency, prefetch=self.prefetch,
                        period=(self.lease - self.config.lease_margin) / 3)

    def _heartbeat(self, wanted: bool | None) -> Heartbeat | None:
        """The lease heartbeat (``wanted`` None: the connection's setting), or None when off."""
        config = self.config
        if config.heartbeat if wanted is None else wanted:
            return Heartbeat(self.store, lease=self.lease, period=(self.lease - config.lease_margin) / 3,
                             registry=self.registry)
        if config.heartbeat:
            logger.info("pgqueue: lease heartbeat off on connection %r, whose jobs may have timeouts longer than "
                        "the lease: a handler that does not call context.extend() is stopped %gs before its "
                        "%gs lease ends", config.name, config.lease_margin, self.lease)
        return None

    # ---------------------------------------------------------------- control
    def wake(self) -> None:
        """Make the worker look for jobs now (called on NOTIFY)."""
        self.fetcher.wake()

    def _vacuumed(self) -> None:
        self.stats.vacuums += 1

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
        listening = (self.notifier, self.cancellations) if self.notifier is not None else ()
        # The heartbeat refreshes the registry's row; with the heartbeat off, the registry does.
        refresher = self.registry if self.heartbeat is None else None
        cancelled = False
        async with Services() as services:
            services.start(self.completer, *listening, self.maintenance, self.heartbeat, refresher,
                           self.scheduler, self.depth_sampler)
            try:
                await self._warn_about_unknown_queues()
                await self.fetcher.run(stop_when_empty, max_jobs)
            except asyncio.CancelledError:
                cancelled = True
                self.stop()
            finally:
                # The order of the drain: nothing new is enqueued or vacuumed (a VACUUM in progress is
                # cancelled on the server) while the running handlers finish, their leases renewed;
                # then the LISTEN ends, and the completer last, once every ack is answered. A stop
                # that takes longer than the drain allows says where it waits.
                async with watch_stop("stopping the worker", after=self.drain_timeout + 10.0):
                    await services.stop(self.scheduler, self.depth_sampler, self.maintenance)
                    await self._drain()
                    await services.stop(self.heartbeat, refresher)
                    await self.registry.deregister()
                    # Threads still running a handler that ignored ``context.cancelled`` are left to
                    # finish; nothing waits for them here.
                    self.executor.shutdown()
                    await services.stop(*listening)
                    await self.completer.wait_idle()
                    await services.stop(self.completer)
        if cancelled:
            raise asyncio.CancelledError
        return self.stats.processed

    async def _warn_about_unknown_queues(self) -> None:
        """Warn once when a served queue has no job, no failure and no job type declaring it: often a misspelt name."""
        try:
            known = await self.store.served_queues()
        except DATABASE_ERRORS as exc:
            logger.debug("pgqueue: could not list the queues in use (%s)", exc)
            return
        # A queue named by the connection or by a registered job type is where jobs are meant to
        # go: empty because it is drained, not misspelt (every healthy start of a worker on a drained
        # 'default' queue used to warn).
        expected = {self.config.queue} | {job.queue for job in registered_jobs().values() if job.queue}
        unknown = [q for q in self.queues if q not in known and q not in expected]
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
