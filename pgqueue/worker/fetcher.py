"""The fetcher: reserves jobs as slots free up (pending acks riding along) and starts their execution."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import psycopg

from pgqueue.storage import is_transient, translate
from pgqueue.store import Reservation, Store
from pgqueue.worker.completer import Completer
from pgqueue.worker.executor import Executor
from pgqueue.worker.instruments import Instruments

if TYPE_CHECKING:
    from pgqueue.worker.worker import WorkerStats

logger = logging.getLogger("pgqueue.worker")


class Fetcher:
    """The reserve loop of one worker (:meth:`run`).

    While slots are free it reserves up to that many jobs of ``queues`` (in order) in one
    statement, sending the completer's pending acks in the same transaction, and starts an
    :class:`Executor` task per reservation. After a full batch it waits briefly for more slots
    (:meth:`_gather_slots`) so the next reservation is a batch too. With nothing to reserve it
    sleeps until notified (:meth:`wake`), until the next delayed job is due, or for
    ``poll_interval`` at most.
    """

    def __init__(self, store: Store, completer: Completer, executor: Executor, stats: WorkerStats, *,
                 queues: list[str], lease: float, concurrency: int, poll_interval: float,
                 fetch_cooldown: float, instruments: Instruments | None = None) -> None:
        self._store = store
        self._instruments = instruments or Instruments()
        self._completer = completer
        self._executor = executor
        self._stats = stats
        self.queues = queues
        self.lease = lease
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.fetch_cooldown = fetch_cooldown
        #: The executions in progress.
        self.running: set[asyncio.Task[bool]] = set()
        self._wakeup = asyncio.Event()
        self._rescheduled = asyncio.Event()
        self._slot_free = asyncio.Event()
        #: Set while sleeping with nothing to reserve; cleared on waking.
        self.idle = asyncio.Event()
        self.stopping = False

    def wake(self) -> None:
        """Look for jobs now (a notification came)."""
        self.idle.clear()
        self._wakeup.set()

    def reschedule(self) -> None:
        """A delayed job was enqueued: an idle fetcher re-reads the next due time."""
        self._rescheduled.set()

    def stop(self) -> None:
        """Stop reserving; wake the loop so it returns."""
        self.stopping = True
        self._wakeup.set()
        self._slot_free.set()

    async def run(self, stop_when_empty: bool, max_jobs: int | None) -> None:
        """Reserve and start executions until stopped (or empty / ``max_jobs`` reservations)."""
        backoff = 0.05
        while not self.stopping:
            free = self.concurrency - len(self.running)
            if max_jobs is not None:
                free = min(free, max_jobs - self._stats.reserved)
                if free <= 0 and self._stats.reserved >= max_jobs:
                    return
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            self._wakeup.clear()
            try:
                reservations = await self._reserve_shielded(free)
            except Exception as exc:
                if is_transient(exc):
                    self._instruments.transient_error()
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
            self._instruments.batch(len(reservations))
            for reservation in reservations:
                self._start(reservation)
            if len(reservations) == free:
                await self._gather_slots()
                continue
            if stop_when_empty:
                if self.running:
                    # A running handler may release its job for an immediate retry.
                    self._slot_free.clear()
                    await self._slot_free.wait()
                    continue
                if not reservations:
                    return
                continue
            await self._idle_wait()

    # ------------------------------------------------------------------ reserve
    async def _reserve_shielded(self, limit: int) -> list[Reservation]:
        """Reserve; if ``run()`` is cancelled meanwhile, hand back what the database granted."""
        pending = asyncio.ensure_future(self._reserve(limit))
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                reservations = await pending
                if reservations:
                    await self._store.release_unstarted([r.id for r in reservations],
                                                        [r.token for r in reservations])
            raise

    async def _reserve(self, limit: int) -> list[Reservation]:
        """Reserve up to ``limit`` jobs; the completer's pending acks ride along in the same
        transaction (one round trip in pipeline mode, one commit for both)."""
        acks = self._completer.take()
        if not acks[0]:
            reservations, _ = await self._store.reserve(self.queues, limit, self.lease)
            return reservations
        try:
            reservations, refused = await self._store.reserve(self.queues, limit, self.lease, acks=acks)
        except BaseException:
            self._completer.give_back(*acks)
            raise
        self._completer.answered(acks[0], refused)
        return reservations

    # -------------------------------------------------------------- executions
    def _start(self, reservation: Reservation) -> None:
        self._stats.reserved += 1
        task = asyncio.create_task(self._executor.run(reservation))
        self.running.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[bool]) -> None:
        self.running.discard(task)
        self._slot_free.set()
        if task.cancelled():
            self._stats.processed += 1
        elif task.exception() is not None:
            self._stats.processed += 1
            logger.error("pgqueue: internal error while executing a job", exc_info=task.exception())
        elif task.result():
            self._stats.processed += 1

    async def _gather_slots(self) -> None:
        """After a full batch (more work is likely waiting), let slots free up so the next
        reservation is a batch too: wait until half the slots are free, or at most
        ``fetch_cooldown`` once at least one is."""
        loop = asyncio.get_running_loop()
        target = max(1, self.concurrency // 2)
        deadline = loop.time() + self.fetch_cooldown
        while not self.stopping:
            free = self.concurrency - len(self.running)
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

    # -------------------------------------------------------------------- idle
    async def _idle_wait(self) -> None:
        """Sleep until notified, until the next job is due, or for the poll interval at most."""
        loop = asyncio.get_running_loop()
        poll_deadline = loop.time() + self.poll_interval
        while not self._wakeup.is_set():
            self._rescheduled.clear()
            try:
                due = await self._store.next_due(self.queues)
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
