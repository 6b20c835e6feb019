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
from pgqueue.worker.buffered import Heirs, Prefetched
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

    Under a queue's concurrency limit (issue 28) it asks for jobs beyond the free slots too, as heirs
    in the slots it holds (:class:`Heirs`): a slot runs its jobs one at a time, each heir starting as
    the job before it ends; the database counts the slot once, whichever of them holds it.
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
        #: Jobs granted beyond a limit's free slots as heirs in the slots held here (issue 28).
        self.waiting = Heirs()
        #: The slot of each running job (the id of the job whose reservation took it), oldest start first.
        self._slot_of: dict[uuid.UUID, uuid.UUID] = {}
        #: The slots held: running a job, or with heirs waiting; by slot, the token that names it.
        self._slots: dict[uuid.UUID, int] = {}
        self._busy: set[uuid.UUID] = set()  # the slots running a job
        self._idle_slots: set[uuid.UUID] = set()  # the slots running none, with heirs waiting
        #: Name the slots in the next reservation (the last came back short, or with heirs).
        self._name_heirs = False
        #: The slots the last reservation named, with their tokens (one may have ended here meanwhile).
        self._asked: dict[uuid.UUID, int] = {}
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
            running, buffered = len(self.running), len(self.buffer) + len(self.waiting)
            free = self.concurrency - running
            room = self.concurrency + self.prefetch - running - buffered
            if max_jobs is not None:
                room = min(room, max_jobs - self._stats.reserved - buffered)
                if room <= 0 and not buffered and self._stats.reserved >= max_jobs:
                    return
            if self._wakeup.is_set():
                exhausted = False
            # Heirs (issue 28) are refilled at half the prefetch: the next ones must come while this
            # worker still runs the jobs of their queue whose slots they inherit.
            refill = len(self.buffer) <= self.low_water and len(self.waiting) <= self.prefetch // 2
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
                # Heirs granted: a limit held the rest back, not a lack of ready jobs. Short without
                # naming the slots now held: one more look, naming them (a limit may be why).
                heirs, short = any(r.waiting for r in reservations), len(reservations) < room
                if reservations:
                    self._add_to_buffer(reservations)
                    self._fill_slots()
                self._name_heirs = heirs or (short and bool(self._slots))
                exhausted = short and not heirs and (bool(self._asked) or not self._name_heirs)
                if reservations and not exhausted and self.prefetch == 0:
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

    # ------------------------------------------------------------------ buffer
    def _add_to_buffer(self, reservations: list[Reservation]) -> None:
        received = time.monotonic() - 0.001  # errs on the early side: the lease began before the answer
        heartbeat = self._heartbeat
        for reservation in reservations:
            item = Prefetched(reservation, received)
            self._buffered[reservation.id] = item
            if heartbeat is not None:
                heartbeat.hold(item)
            if not reservation.waiting:
                self.buffer.append(item)
            elif (slot := reservation.heir_of) is not None and (slot in self._slots or slot in self._asked):
                # (a slot whose job ended while the reservation was on its way is still held: the
                # database granted the heir while that job's reservation held it)
                self._slots.setdefault(slot, self._asked.get(slot, 0))
                self.waiting.add(slot, item)
                if slot not in self._busy:
                    self._idle_slots.add(slot)
            else:  # granted for pgqueue.hand_over, which this worker never asks for: not startable
                self._to_hand_back.append(self._take(item))
        self._start_heirs()

    def _start_heirs(self) -> None:
        """Start the next heir of each slot held that runs no job (its job ended while the
        reservation was on its way), while execution slots are free."""
        for slot in list(self._idle_slots):
            if len(self.running) >= self.concurrency or self.stopping:
                return
            self._next_in(slot)

    def _next_in(self, slot: uuid.UUID) -> None:
        """Start the next heir of ``slot`` (none may run in it now); a slot left with no job running or
        waiting is no longer held here."""
        margin = self._executor.lease_margin
        self._idle_slots.discard(slot)
        while (heir := self.waiting.pop(slot)) is not None:
            self._take(heir)
            left = heir.deadline - time.monotonic()
            if heir.finished:  # cancelled, or its lease was lost
                self.expired += 1
            elif self.stopping or left <= margin:
                self.expired += not self.stopping
                self._to_hand_back.append(heir)
            else:
                self._start(heir.reservation, heir.received, left, slot)
                return
        self._slots.pop(slot, None)

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
        items.extend(self._take(item) for item in self.waiting.take_all() if not item.finished)
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
        heirs = self._heirs_asked(limit) if self._name_heirs else None
        self._asked = dict(heirs) if heirs else {}
        acks = self._completer.take()
        if acks.empty:
            reservations, _ = await self._store.reserve(self.queues, limit, self.lease, run_now=run_now,
                                                        heirs=heirs)
            return reservations
        try:
            reservations, refused = await self._store.reserve(self.queues, limit, self.lease, run_now=run_now,
                                                              acks=acks, heirs=heirs)
        except BaseException:
            self._completer.give_back(acks)
            raise
        self._completer.answered(acks.ids, refused)
        return reservations

    def _heirs_asked(self, limit: int) -> list[tuple[uuid.UUID, int]] | None:
        """Slot heirs: each slot held named once per heir asked for in it, the slots evened out up to
        ``limit`` heirs in all (with those waiting), the oldest slot first (its job likeliest to end
        first), round by round."""
        slots = self._slots
        if not slots:
            return None
        per = (limit + len(self.waiting)) // len(slots)
        wanted = {slot: per - self.waiting.queued(slot) for slot in slots}
        names: list[tuple[uuid.UUID, int]] = []
        for n in range(max(wanted.values(), default=0)):
            names.extend((slot, token) for slot, token in slots.items() if wanted[slot] > n)
        return names[:limit] or None

    # -------------------------------------------------------------- executions
    def _start(self, reservation: Reservation, received: float | None = None, lease_left: float | None = None,
               slot: uuid.UUID | None = None) -> None:
        """Run a reserved job: in ``slot`` (an heir), or in the slot its own reservation took."""
        self._stats.reserved += 1
        if slot is None:
            slot = reservation.id
            self._slots[slot] = reservation.token
        self._slot_of[reservation.id] = slot
        self._busy.add(slot)
        run = self._executor.run(reservation, received, lease_left) if not reservation.prefetched else \
            self._run_marked(reservation, received, lease_left)
        task = asyncio.create_task(run)
        self.running[task] = reservation.queue
        self._job_of[task] = reservation.id
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[bool]) -> None:
        queue = self.running.pop(task, None)
        job_id = self._job_of.pop(task, None)
        self._ended_since_reserve = True
        if queue is not None and job_id is not None:
            slot = self._slot_of.pop(job_id, None)
            if slot is not None:  # the slot is its next heir's now, if it has one
                self._busy.discard(slot)
                self._next_in(slot)
            if self._idle_slots:
                self._start_heirs()
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
