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
from pgqueue.store.errors import classify, translate
from pgqueue.worker.buffered import Prefetched, WaitingJobs
from pgqueue.worker.completer import Completer
from pgqueue.worker.executor import Executor
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.instruments import Instruments
from pgqueue.worker.outcomes import WorkerStats
from pgqueue.worker.waits import FetcherWaits

logger = logging.getLogger("pgqueue.worker")


class Fetcher(FetcherWaits):
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

    Under a queue's concurrency limit (issue 28) it asks for jobs beyond the free slots too, granted
    waiting (:class:`WaitingJobs`): as one of its jobs of that queue ends with an ack, a waiting one
    starts in its slot at once, handed over with that ack.
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
        self._job_of: dict[asyncio.Task[bool], uuid.UUID] = {}
        self._running_in: collections.Counter[str] = collections.Counter()
        #: Jobs granted beyond a limit's free slots, each waiting for a slot handed over.
        self.waiting = WaitingJobs()
        self._reserving = False  # a reservation is on its way
        #: The queue of each running job, by id; the waiting job to start in a running job's slot
        #: when it ends (chosen as its ack was added, which carries the handover).
        self._queue_of: dict[uuid.UUID, str] = {}
        self._heirs: dict[uuid.UUID, Prefetched] = {}
        completer.on_ack_pending = self._ack_pending
        completer.on_refused_handoffs = self._handoffs_refused
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
        for item in [*self.buffer, *self.waiting]:
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
            expired, self._to_hand_back = self._to_hand_back, []
            await self._hand_back(expired)  # (nothing when there are none)
            running, buffered = len(self.running), len(self.buffer) + self.waiting.count
            free = self.concurrency - running
            room = self.concurrency + self.prefetch - running - buffered
            if max_jobs is not None:
                room = min(room, max_jobs - self._stats.reserved - buffered)
                if room <= 0 and not buffered and self._stats.reserved >= max_jobs:
                    return
            if self._wakeup.is_set():
                exhausted = False
            # Waiting jobs (issue 28) are refilled at half the prefetch: the next ones must come while
            # this worker still runs jobs of their queue, whose slots they inherit.
            refill = len(self.buffer) <= self.low_water and self.waiting.count <= self.prefetch // 2
            if room > 0 and refill and not exhausted:
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
                self._strand_checks()  # (skipped while the reservation was on its way)
                if reservations and not exhausted and self.prefetch == 0:
                    await self._gather_slots()
                continue
            if buffered or free <= 0:
                # Slots full (buffered jobs wait for one), or the buffer is still half full (waiting
                # jobs with no job of theirs left to inherit from claim a slot or go back first).
                if not self._strand_checks():
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

    # ------------------------------------------------------------------ buffer
    def _add_to_buffer(self, reservations: list[Reservation]) -> None:
        received = time.monotonic() - 0.001  # errs on the early side: the lease began before the answer
        heartbeat = self._heartbeat
        waiting = self.waiting
        for reservation in reservations:
            item = Prefetched(reservation, received)
            if reservation.waiting:
                waiting.add(item)
            else:
                waiting.off.discard(reservation.queue)  # a slot granted: the limit has room again
                self.buffer.append(item)
            self._buffered[reservation.id] = item
            if heartbeat is not None:
                heartbeat.hold(item)

    def _take(self, item: Prefetched | None = None) -> Prefetched:
        if item is None:
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
        for queue in self.waiting.queues():
            items.extend(self._take(item) for item in self.waiting.take_queue(queue) if not item.finished)
        heirs, self._heirs = list(self._heirs.values()), {}
        items.extend(self._take(item) for item in heirs if not item.finished)
        return items

    # -------------------------------------------------------------- handover
    def _ack_pending(self, job_id: uuid.UUID) -> None:
        """Issue 28: the running job ``job_id`` is acked (the ack is pending in the completer): its
        queue's oldest waiting job inherits its slot, handed over with that ack, and starts as the
        job's execution ends (:meth:`_finished`). Chosen here, not at the end, so that no batch can
        take the ack without its handover in between."""
        queue = self._queue_of.get(job_id)
        if queue is None or self.stopping or queue in self.waiting.off or not self.waiting.has(queue):
            return
        now = time.monotonic()
        margin = self._executor.lease_margin
        while (item := self.waiting.pop(queue)) is not None:
            if item.finished:  # cancelled, or its lease was lost
                self._take(item)
                self.expired += 1
                continue
            left = item.deadline - now
            if left <= margin:
                self._take(item)
                self.expired += 1
                self._to_hand_back.append(item)
                continue
            if not self._completer.hand_over(job_id, item.id, item.token):
                self.waiting.put_back(item)
                return
            self._heirs[job_id] = item
            return

    def _strand_checks(self) -> bool:
        """:meth:`_strand_check` each queue with waiting jobs; True if it started or handed back any."""
        before = (len(self.running), len(self._to_hand_back))
        for queue in self.waiting.queues():
            self._strand_check(queue)
        return (len(self.running), len(self._to_hand_back)) != before

    def _strand_check(self, queue: str) -> None:
        """Waiting jobs of ``queue`` with no job of it running or about to, so none to inherit a slot
        from: each free execution slot starts one that first asks for a free slot of the queue
        (:meth:`Completer.claim`); where handover is off, they are handed back (a reservation grants
        them again)."""
        if not self.waiting.has(queue) or self._reserving or self._running_in[queue] > 0 or \
                any(i.reservation.queue == queue for i in self.buffer):
            return  # (a reservation on its way may bring jobs of the queue that hold slots: after it)
        if queue in self.waiting.off:
            self._to_hand_back.extend(self._take(item) for item in self.waiting.take_queue(queue)
                                      if not item.finished)
            self._slot_free.set()  # the loop sends them
            return
        now = time.monotonic()
        while len(self.running) < self.concurrency and (item := self.waiting.pop(queue)) is not None:
            self._take(item)
            if item.finished:
                self.expired += 1
            elif (left := item.deadline - now) <= self._executor.lease_margin:
                self.expired += 1
                self._to_hand_back.append(item)
            else:
                self._start(item.reservation, item.received, left, claim=True)

    def _handoffs_refused(self, ids: list[uuid.UUID]) -> None:
        """The database handed no slot to these started waiting jobs (a pause, a limit lowered, a
        lease lost): no more handover in their queues, nor in the others that wait, until a
        reservation grants slots there again."""
        # One that has ended here already (a snooze or a retry committed before the handover) is no
        # concern: its slot went back with its end.
        refused = set(ids).intersection(self._job_of.values())
        if not refused:
            return
        logger.warning("pgqueue: %d jobs started in a slot handed over were refused it (their queue was "
                       "paused or its limit lowered, or their lease was lost); no more handover there until "
                       "a reservation grants slots again", len(refused))
        self.waiting.off.update(self.running[t] for t, job_id in self._job_of.items() if job_id in refused)
        self.waiting.off.update(self.waiting.queues())
        for queue in self.waiting.queues():
            self._strand_check(queue)

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
        self._reserving = True
        pending.add_done_callback(self._reserved)
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                reservations = await pending
                if reservations:
                    await self._store.release_unstarted([r.id for r in reservations],
                                                        [r.token for r in reservations])
            raise

    def _reserved(self, _: object) -> None:
        self._reserving = False

    async def _reserve(self, limit: int) -> list[Reservation]:
        """Reserve up to ``limit`` jobs; the completer's pending acks ride along in the same
        transaction (one round trip in pipeline mode, one commit for both)."""
        # The jobs past the free slots wait in the buffer: granted as prefetched.
        run_now = max(0, min(limit, self.concurrency - len(self.running) - len(self.buffer)))
        waiting = self.waiting.budget(self.queues, self._running_in, limit)
        acks = self._completer.take()
        if acks.empty:
            reservations, _ = await self._store.reserve(self.queues, limit, self.lease, run_now=run_now,
                                                        waiting=waiting)
            return reservations
        try:
            reservations, refused = await self._store.reserve(self.queues, limit, self.lease, run_now=run_now,
                                                              acks=acks, waiting=waiting)
        except BaseException:
            self._completer.give_back(*acks)
            raise
        self._completer.answered(acks[0], refused, acks.handoffs)
        return reservations

    # -------------------------------------------------------------- executions
    def _start(self, reservation: Reservation, received: float | None = None, lease_left: float | None = None,
               claim: bool = False) -> None:
        self._stats.reserved += 1
        run = self._run_claimed(reservation, received, lease_left) if claim else \
            self._executor.run(reservation, received, lease_left) if not reservation.prefetched else \
            self._run_marked(reservation, received, lease_left)
        task = asyncio.create_task(run)
        self.running[task] = reservation.queue
        self._job_of[task] = reservation.id
        self._queue_of[reservation.id] = reservation.queue
        self._running_in[reservation.queue] += 1
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[bool]) -> None:
        queue = self.running.pop(task, None)
        job_id = self._job_of.pop(task, None)
        self._ended_since_reserve = True
        if queue is not None and job_id is not None:
            self._running_in[queue] -= 1
            self._queue_of.pop(job_id, None)
            heir = self._heirs.pop(job_id, None)
            if heir is not None:  # its slot was handed over with this job's ack
                self._take(heir)
                if heir.finished:
                    self.expired += 1
                elif self.stopping:
                    self._to_hand_back.append(heir)
                else:
                    self._start(heir.reservation, heir.received, heir.deadline - time.monotonic())
            if self._running_in[queue] <= 0:
                del self._running_in[queue]
                self.waiting.ended[queue] += 1
            if heir is None:  # a slot left without an heir: waiting jobs may have none to inherit from now
                self._strand_checks()
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

    async def _run_claimed(self, reservation: Reservation, received: float | None, lease_left: float | None,
                           ) -> bool:
        """A waiting job with no slot to inherit: run it once the database gave it a free one; if there
        was none, handover ends in its queue and the job goes back (the attempt does not count)."""
        try:
            claimed = await self._completer.claim(reservation.id, reservation.token)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._store.release_unstarted([reservation.id], [reservation.token]))
            raise
        if not claimed:
            self.waiting.off.add(reservation.queue)
            self._to_hand_back.append(Prefetched(reservation, received or time.monotonic()))
            self._slot_free.set()
            return False
        if reservation.prefetched:
            return await self._run_marked(reservation, received, lease_left)
        return await self._executor.run(reservation, received, lease_left)
