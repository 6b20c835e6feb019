"""The fetcher: reserves jobs as slots free up (pending acks riding along) and starts their execution."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import uuid

import psycopg

from pgqueue.store import Reservation, Store
from pgqueue.store.errors import classify, is_transient, translate
from pgqueue.worker.completer import Completer
from pgqueue.worker.executor import Executor
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.instruments import Instruments
from pgqueue.worker.outcomes import WorkerStats

logger = logging.getLogger("pgqueue.worker")


class Prefetched:
    """A reserved job waiting in the fetcher's buffer for a free slot (see :class:`Fetcher`).

    The heartbeat renews its lease while it waits (it is a lease holder like a running
    handler's context): a renewal moves :attr:`deadline`; a refused one (the lease was lost,
    or the job was cancelled or cleared) marks it :attr:`finished` and it is never started.
    """

    __slots__ = ("deadline", "finished", "received", "reservation")

    def __init__(self, reservation: Reservation, received: float) -> None:
        self.reservation = reservation
        #: When the reservation arrived (``time.monotonic()``): the job's wait in the buffer
        #: counts in its queue latency (the history's ``wait``).
        self.received = received
        #: When the lease ends (``time.monotonic()`` clock), measured from before the reservation.
        self.deadline = received + reservation.lease_seconds_left
        #: Dropped (lease lost or job cancelled): not to be started nor handed back.
        self.finished = False

    @property
    def id(self) -> uuid.UUID:
        return self.reservation.id

    @property
    def token(self) -> int:
        return self.reservation.token

    @property
    def attempts(self) -> int:
        return self.reservation.attempts

    def log_fields(self) -> dict[str, object]:
        """The job fields of a log line about this buffered job (as ``JobContext.log_fields``)."""
        r = self.reservation
        return {"job_id": str(r.id), "queue": r.queue, "attempt": r.attempts, "token": r.token}

    def _lease_renewed(self, ends_at: float) -> None:
        self.deadline = max(self.deadline, ends_at)

    def _lease_lost(self) -> bool:
        if self.finished:
            return False
        self.finished = True
        return True


class Fetcher:
    """The reserve loop of one worker (:meth:`run`).

    It reserves jobs of ``queues`` (in order) in one statement, sending the completer's
    pending acks in the same transaction, into a local buffer, and starts an
    :class:`Executor` task per buffered job while slots are free. With ``prefetch`` > 0 the
    buffer holds up to ``prefetch`` jobs beyond the free slots, and it is refilled (up to
    ``concurrency + prefetch`` held in all) once it is down to ``min(prefetch // 2, concurrency)``:
    one reservation serves
    many more jobs than the slots that freed, so the per-reservation cost (round trip,
    commit, plpgsql) is spread over them. Buffered jobs are leased: the heartbeat renews
    them, one whose lease is about to end (``lease_margin``) or was lost is not started, a
    cancelled one (``pgqueue_cancel``, confirmed by the database) is dropped, and on stop the buffer is handed back
    unstarted (``pgqueue.release_unstarted``: the attempt does not count).

    With ``prefetch = 0`` it reserves exactly the free slots, and after a full batch it waits
    briefly for more slots (:meth:`_gather_slots`, at most ``fetch_cooldown``) so the next
    reservation is a batch too. With nothing to reserve it sleeps until notified
    (:meth:`wake`), until the next delayed job is due, or for ``poll_interval`` at most.
    """

    def __init__(self, store: Store, completer: Completer, executor: Executor, stats: WorkerStats, *,  # noqa: PLR0913  # keyword-only: its collaborators and WorkerOptions fields
                 queues: list[str], lease: float, concurrency: int, poll_interval: float,
                 fetch_cooldown: float, prefetch: int = 0, heartbeat: Heartbeat | None = None,
                 instruments: Instruments | None = None) -> None:
        self._store = store
        self._instruments = instruments or Instruments()
        self._completer = completer
        self._executor = executor
        self._stats = stats
        self._heartbeat = heartbeat
        self.queues = queues
        self.lease = lease
        self.concurrency = concurrency
        self.prefetch = prefetch
        #: The buffer is refilled once it holds this many jobs or fewer.
        self.low_water = min(prefetch // 2, concurrency)
        self.poll_interval = poll_interval
        self.fetch_cooldown = fetch_cooldown
        #: The executions in progress, each with its job's queue.
        self.running: dict[asyncio.Task[bool], str] = {}
        #: Reserved jobs waiting for a slot, oldest reservation first.
        self.buffer: collections.deque[Prefetched] = collections.deque()
        self._buffered: dict[uuid.UUID, Prefetched] = {}
        #: Buffered jobs not started because their lease was about to end, or was lost.
        self.expired = 0
        self._to_hand_back: list[Prefetched] = []
        self._wakeup = asyncio.Event()
        self._rescheduled = asyncio.Event()
        self._slot_free = asyncio.Event()
        #: An execution ended since the last reservation began (it may have released its job).
        self._ended_since_reserve = False
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
        """Stop reserving; wake the loop so it returns (handing back the buffer)."""
        self.stopping = True
        self._wakeup.set()
        self._slot_free.set()

    def in_flight(self) -> dict[str, tuple[int, int]]:
        """Per queue, ``(running, buffered)``: the executions in progress and the reserved jobs
        waiting in the buffer for a slot (read by the metrics, from their server's thread: a copy
        of each container first, which a concurrent change can only make raise RuntimeError). Every
        queue this worker serves is there, with (0, 0) when it holds none."""
        counts = dict.fromkeys(self.queues, (0, 0))
        for queue in list(self.running.values()):
            running, buffered = counts.get(queue, (0, 0))
            counts[queue] = (running + 1, buffered)
        for item in list(self.buffer):
            running, buffered = counts.get(item.reservation.queue, (0, 0))
            counts[item.reservation.queue] = (running, buffered + 1)
        return counts

    def buffered_job(self, job_id: uuid.UUID) -> Prefetched | None:
        """The job of that id waiting in the buffer, if any (a confirmed cancellation drops it:
        see :class:`pgqueue.worker.cancellation.Cancellations`)."""
        return self._buffered.get(job_id)

    async def run(self, stop_when_empty: bool, max_jobs: int | None) -> None:
        """Reserve and start executions until stopped (or empty / ``max_jobs`` reservations);
        the jobs still buffered are then handed back."""
        try:
            await self._loop(stop_when_empty, max_jobs)
        finally:
            self.stopping = True  # a slot freed from now on starts nothing
            items, self._to_hand_back = self._to_hand_back + self._drain_buffer(), []
            await asyncio.shield(self._hand_back(items))

    async def _loop(self, stop_when_empty: bool, max_jobs: int | None) -> None:
        backoff = 0.05
        exhausted = False  # the last reservation came back short: nothing more was ready
        while not self.stopping:
            self._fill_slots()
            if self._to_hand_back:
                expired, self._to_hand_back = self._to_hand_back, []
                await self._hand_back(expired)
            running, buffered = len(self.running), len(self.buffer)
            free = self.concurrency - running
            room = self.concurrency + self.prefetch - running - buffered
            if max_jobs is not None:
                room = min(room, max_jobs - self._stats.reserved - buffered)
                if room <= 0 and not buffered and self._stats.reserved >= max_jobs:
                    return
            if self._wakeup.is_set():
                exhausted = False
            if room > 0 and buffered <= self.low_water and not exhausted:
                self._wakeup.clear()
                self._ended_since_reserve = False
                try:
                    reservations = await self._reserve_shielded(room)
                except Exception as exc:
                    self._reserve_failed(exc, backoff)
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                backoff = 0.05
                self._instruments.batch(len(reservations))
                exhausted = len(reservations) < room
                if reservations:
                    self._add_to_buffer(reservations)
                    self._fill_slots()
                    if not exhausted and self.prefetch == 0:
                        await self._gather_slots()
                continue
            if buffered or free <= 0:
                # Slots full (buffered jobs wait for one), or the buffer is still half full.
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            if not await self._nothing_ready(stop_when_empty):
                return
            exhausted = False

    def _reserve_failed(self, exc: Exception, backoff: float) -> None:
        """Log a failed reservation the loop retries after ``backoff``, or raise what must stop the worker."""
        fault = classify(exc)
        if fault == "transient":
            self._instruments.transient_error()
            logger.warning("pgqueue: reserving failed (%s); retrying in %.2fs", exc, backoff)
        elif fault == "refused":
            # Data-dependent refusals (a trigger, a full disk refusing the failure record of an
            # expired final attempt) must not kill the worker: keep trying with backoff.
            logger.error("pgqueue: reserving failed (%s: %s); retrying in %.2fs", type(exc).__name__, exc, backoff)
        elif fault == "configuration" and isinstance(exc, psycopg.Error):
            # Not migrated, no privilege: configuration, not a passing fault.
            raise translate(exc, "reserving jobs") from exc
        else:
            raise exc

    async def _nothing_ready(self, stop_when_empty: bool) -> bool:
        """Nothing buffered, slots free, and the last reservation found nothing more: wait for a reason to
        look again (True), or end the loop (False) when draining and nothing more can come."""
        if not stop_when_empty:
            await self._idle_wait()
            return True
        if self.running:
            # A running handler may release its job for an immediate retry.
            self._slot_free.clear()
            await self._slot_free.wait()
            return True
        # One ended after the last reservation (which came back short): look once more.
        return self._ended_since_reserve

    # ------------------------------------------------------------------ buffer
    def _add_to_buffer(self, reservations: list[Reservation]) -> None:
        received = time.monotonic() - 0.001  # errs on the early side: the lease began before the answer
        heartbeat = self._heartbeat
        for reservation in reservations:
            item = Prefetched(reservation, received)
            self.buffer.append(item)
            self._buffered[reservation.id] = item
            if heartbeat is not None:
                heartbeat.hold(item)

    def _take(self) -> Prefetched:
        item = self.buffer.popleft()
        del self._buffered[item.id]
        if self._heartbeat is not None:
            self._heartbeat.drop(item)
        return item

    def _fill_slots(self) -> None:
        """Start buffered jobs while slots are free (called by the loop and as each execution
        ends, so a freed slot is filled at once, even while a reservation is in flight). A job
        whose lease is about to end is kept for the loop to hand back: started, it would have
        no time left to run."""
        if not self.buffer or self.stopping:
            return
        now = time.monotonic()
        margin = self._executor.lease_margin
        while self.buffer and len(self.running) < self.concurrency:
            item = self._take()
            if item.finished:  # cancelled, or its lease was lost
                self.expired += 1
                continue
            left = item.deadline - now
            if left <= margin:
                self.expired += 1
                self._to_hand_back.append(item)
                continue
            self._start(item.reservation, item.received, left)

    def _drain_buffer(self) -> list[Prefetched]:
        items: list[Prefetched] = []
        while self.buffer:
            item = self._take()
            if not item.finished:
                items.append(item)
        return items

    async def _hand_back(self, items: list[Prefetched]) -> None:
        """Release buffered jobs unstarted (fenced; the attempt does not count)."""
        if not items:
            return
        try:
            await self._store.release_unstarted([i.id for i in items], [i.token for i in items])
        except Exception as exc:
            logger.warning("pgqueue: could not hand back %d buffered jobs (%s); they return when their "
                           "leases expire", len(items), exc)

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
        # The jobs past the free slots wait in the buffer: granted as prefetched.
        run_now = max(0, min(limit, self.concurrency - len(self.running) - len(self.buffer)))
        acks = self._completer.take()
        if not acks[0]:
            reservations, _ = await self._store.reserve(self.queues, limit, self.lease, run_now=run_now)
            return reservations
        try:
            reservations, refused = await self._store.reserve(self.queues, limit, self.lease, run_now=run_now,
                                                              acks=acks)
        except BaseException:
            self._completer.give_back(*acks)
            raise
        self._completer.answered(acks[0], refused)
        return reservations

    # -------------------------------------------------------------- executions
    def _start(self, reservation: Reservation, received: float | None = None, lease_left: float | None = None,
               ) -> None:
        self._stats.reserved += 1
        run = self._executor.run(reservation, received, lease_left) if not reservation.prefetched else \
            self._run_marked(reservation, received, lease_left)
        task = asyncio.create_task(run)
        self.running[task] = reservation.queue
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[bool]) -> None:
        self.running.pop(task, None)
        self._ended_since_reserve = True
        self._fill_slots()
        self._slot_free.set()
        if task.cancelled():
            self._stats.processed += 1
        elif task.exception() is not None:
            self._stats.processed += 1
            logger.error("pgqueue: internal error while executing a job", exc_info=task.exception())
        elif task.result():
            self._stats.processed += 1

    async def _run_marked(self, reservation: Reservation, received: float | None, lease_left: float | None,
                          ) -> bool:
        """A buffered job on its final try: clear its mark first (``pgqueue.mark_started``, with the
        completer's next flush), so a death before this point gives the try back; run it only if
        the fence accepted."""
        try:
            marked = await self._completer.mark(reservation.id, reservation.token)
        except asyncio.CancelledError:
            # A forced stop while the mark was on its way: the handler never started, so hand the
            # job back with its try (fenced: nothing happens if the lease was lost meanwhile).
            with contextlib.suppress(Exception):
                await asyncio.shield(self._store.release_unstarted([reservation.id], [reservation.token]))
            raise
        if not marked:
            self.expired += 1
            logger.warning("pgqueue: job %s was not started from the prefetch buffer: its lease was lost "
                           "(it expired, or the job was cancelled or cleared)", reservation.id)
            return False
        return await self._executor.run(reservation, received, lease_left)

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
        """Sleep until notified, until the next job is due, until one of this worker's executions
        ends, or for the poll interval at most.

        An execution that ends may have held a queue's or a partition's concurrency limit at
        its ceiling (the reason the last reservation came back short): its ack rides with the
        next reservation, which may then be granted the freed slot at once (issue 28: without
        this, a worker under a limit reserved once per ``next_due`` re-look, 50 ms, and a queue
        limit of 40 drained at a twentieth of the unlimited rate). One more reservation per
        execution that ends while the queues are short of ready jobs: it carries the ack the
        completer would have sent alone."""
        loop = asyncio.get_running_loop()
        poll_deadline = loop.time() + self.poll_interval
        # Let the executions just started take their first step (up to their handler's first
        # await) before the next_due round trip: a job that woke an idle worker starts sooner.
        await asyncio.sleep(0)
        while not self._wakeup.is_set() and not self._ended_since_reserve:
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
            if wait <= 0 or self._wakeup.is_set() or self._ended_since_reserve:
                if due is not None and due <= 0 and not self._ended_since_reserve:
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
        waits = [wakeup, rescheduled]
        if self.running:  # one of them ending is a reason to look again (see _idle_wait)
            self._slot_free.clear()
            waits.append(asyncio.ensure_future(self._slot_free.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return self._rescheduled.is_set() and not self._wakeup.is_set() and not self._ended_since_reserve

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), seconds)
