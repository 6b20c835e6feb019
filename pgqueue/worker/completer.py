"""The completer: owns every ack of a worker — batched, riding with a reservation, or a handler's own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence

from psycopg_pool import PoolClosed

from pgqueue.store import AckBatch, Store
from pgqueue.store.errors import DATABASE_ERRORS
from pgqueue.worker.instruments import Instruments
from pgqueue.worker.outcomes import Ended, Outcome, Outcomes

logger = logging.getLogger("pgqueue.worker")


class Completer:
    """Collects (job id, token) pairs and deletes them with ``pgqueue.ack`` (:meth:`Store.ack`) in batches.

    A flush happens ``flush_interval`` seconds after the first pending ack, or as soon as
    ``batch_size`` acks are pending. Under a backlog the fetcher usually gets there first:
    it :meth:`take` s the pending acks and sends them in the same transaction as its next
    reservation, so a busy worker commits once per batch instead of twice.

    A crash loses at most the acks not yet flushed: those jobs run again after their lease
    expires (at-least-once). A database error keeps the pending acks and retries with
    backoff. An ack added with its attempt's :class:`~pgqueue.worker.outcomes.Ended` event ends
    that attempt once the database answers: ``outcomes`` hears it ``acked``, or ``lost`` (reason
    ``ack_refused``) when the fence refused it.

    A handler's own ack (``context.ack()``) goes through :meth:`ack_now`: at once and
    unbatched, because the handler waits to learn whether the fence accepted it.

    Each ack carries the handler's run time and its wait from reservation to start, which
    ``pgqueue.ack`` adds to the history (``pgqueue.job_stats``); with ``keep_completed`` the
    acked jobs are also copied to ``pgqueue.completed_jobs`` by the same statement.

    An ack that carries a result (issue 26: the job keeps it, ``result_ttl``) goes apart, with the
    next flush of the completer's own, through ``pgqueue.ack_results``, which stores the result in
    the ack's own fenced statement; the plain acks (and those riding with a reservation) are
    unchanged and pay nothing for results.
    """

    def __init__(self, store: Store, *, flush_interval: float = 0.005,
                 batch_size: int = 500, outcomes: Outcomes | None = None,
                 keep_completed: bool = False, instruments: Instruments | None = None) -> None:
        self._store = store
        self._instruments = instruments or Instruments()
        self._outcomes = outcomes or Outcomes()
        self.flush_interval = flush_interval
        self.batch_size = batch_size
        self.keep_completed = keep_completed
        self._ids: list[uuid.UUID] = []
        self._tokens: list[int] = []
        self._durations: list[float | None] = []
        self._waits: list[float | None] = []
        #: The attempts the pending and in-flight acks end, by job id (told once answered).
        self._ended: dict[uuid.UUID, Ended] = {}
        #: Acks carrying a result: (id, token, duration, wait, result JSON text, seconds kept).
        self._kept: list[tuple[uuid.UUID, int, float | None, float | None, str, float]] = []
        #: Prefetched jobs waiting for ``pgqueue.mark_started`` before they start: id -> (token, answer).
        self._marks: dict[uuid.UUID, tuple[int, asyncio.Future[bool]]] = {}
        self._in_flight = 0  # batches taken and not yet answered or given back
        self._sending = 0  # the acks in those batches
        self._pending = asyncio.Event()
        self._full = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.acked = 0
        self.refused = 0

    def add(self, job_id: uuid.UUID, token: int, duration: float | None = None, wait: float | None = None,
            ended: Ended | None = None, result: tuple[str, float] | None = None) -> None:
        """Queue an acknowledgement (with the handler's run time and its wait from reservation to
        start, in seconds); it is sent with the next flush. ``ended``: the attempt's ``acked``
        outcome, emitted once the database accepted the ack (``lost`` if the fence refused it).
        ``result``: the job's result (JSON text) and the seconds it is kept, stored by the same
        fenced statement as the ack."""
        if ended is not None:
            self._ended[job_id] = ended
        if result is not None:
            self._kept.append((job_id, token, duration, wait, result[0], result[1]))
            self._idle.clear()
            self._pending.set()
            return
        self._ids.append(job_id)
        self._tokens.append(token)
        self._durations.append(duration)
        self._waits.append(wait)
        self._idle.clear()
        self._pending.set()
        if len(self._ids) >= self.batch_size:
            self._full.set()

    async def mark(self, job_id: uuid.UUID, token: int) -> bool:
        """Clear a prefetched job's mark before it starts (``pgqueue.mark_started``), with the next
        flush, which goes at once; False if the fence refused (its lease was lost: do not start it)."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._marks[job_id] = (token, answer)
        self._pending.set()
        self._full.set()  # a job waits to start: no flush interval
        return await answer

    def _take_marks(self) -> dict[uuid.UUID, tuple[int, asyncio.Future[bool]]]:
        marks, self._marks = self._marks, {}
        if not self._ids:
            self._pending.clear()
            self._full.clear()
        return marks

    @staticmethod
    def _answer(marks: dict[uuid.UUID, tuple[int, asyncio.Future[bool]]], marked: set[uuid.UUID]) -> None:
        for job_id, (_, answer) in marks.items():
            if not answer.done():
                answer.set_result(job_id in marked)

    async def ack_now(self, job_id: uuid.UUID, token: int) -> bool:
        """Acknowledge one job now (a handler's ``context.ack()``); False if the fence refused.

        Not counted in :attr:`acked`, which counts the acks of jobs whose handler returned.
        """
        return not await self._store.ack([job_id], [token], keep=self.keep_completed)

    @property
    def pending(self) -> int:
        """Acks not yet confirmed by the database: waiting to be sent, or sent and not yet answered."""
        return len(self._ids) + len(self._kept) + self._sending

    async def wait_idle(self) -> None:
        """Wait until every ack added so far has been flushed (or given up on)."""
        await self._idle.wait()

    # ------------------------------------------------------- sending, by anyone
    def take(self) -> AckBatch:
        """Hand over the pending acks to send; follow with :meth:`answered` or :meth:`give_back`.

        Nothing while another batch is in flight: one batch at a time, so each is sent once the one
        before is committed."""
        if self._in_flight or not self._ids:
            return AckBatch([], [], [], [], self.keep_completed)  # new lists: never the live ones add() appends to
        batch = AckBatch(self._ids, self._tokens, self._durations, self._waits, self.keep_completed)
        self._ids, self._tokens, self._durations, self._waits = [], [], [], []
        if not self._marks and not self._kept:  # marks waiting keep it due
            self._full.clear()
            self._pending.clear()
        self._in_flight += 1
        self._sending += len(batch.ids)
        return batch

    def answered(self, ids: Sequence[uuid.UUID], refused: Sequence[uuid.UUID]) -> None:
        """The database answered for acks from :meth:`take`; ``refused`` are the ids the fence refused."""
        self._in_flight -= 1
        if not self._in_flight and (self._ids or self._marks):
            self._pending.set()  # what came meanwhile goes now (the flush loop waits for this)
            if self._marks or len(self._ids) >= self.batch_size:
                self._full.set()
        self._sending -= len(ids)
        self.acked += len(ids) - len(refused)
        self.refused += len(refused)
        ended = self._ended
        if ended:
            emit = self._outcomes.emit
            lost = set(refused)
            for job_id in ids:
                event = ended.pop(job_id, None)
                if event is None:
                    continue
                if job_id in lost:
                    event.outcome, event.reason = Outcome.LOST, "ack_refused"
                    lost.discard(job_id)
                emit(event)
            refused = list(lost)
        for job_id in refused:  # an ack added without its attempt's outcome
            logger.warning("pgqueue: job %s finished but its ack was refused: the lease was lost (it expired "
                           "and the job was reserved again, or it was cleared); it may run twice", job_id,
                           extra={"job_id": str(job_id)})
        if not self._ids and not self._in_flight and not self._kept:
            self._idle.set()

    def give_back(self, batch: AckBatch) -> None:
        """A batch from :meth:`take` that could not be sent: its acks are pending again, first."""
        self._in_flight -= 1
        self._sending -= len(batch.ids)
        self._ids[:0], self._tokens[:0] = batch.ids, batch.tokens
        self._durations[:0], self._waits[:0] = batch.durations, batch.waits
        if self._ids or self._kept:
            self._pending.set()
        elif not self._in_flight:
            self._idle.set()

    async def _flush_kept(self) -> None:
        """Send the acks that carry results (``pgqueue.ack_results``); on an error they stay pending."""
        kept, self._kept = self._kept, []
        ids = [k[0] for k in kept]
        self._in_flight += 1  # answered() counts both back
        self._sending += len(ids)
        try:
            refused = await self._store.ack_results(ids, [k[1] for k in kept], [k[2] for k in kept],
                                                    [k[3] for k in kept], self.keep_completed,
                                                    [k[4] for k in kept], [k[5] for k in kept])
        except BaseException:
            self._in_flight -= 1
            self._sending -= len(ids)
            self._kept[:0] = kept
            raise
        self.answered(ids, refused)

    # ------------------------------------------------------------- own flushing
    async def run(self) -> None:
        """Flush loop; runs until cancelled, flushing what is pending first."""
        try:
            while True:
                await self._pending.wait()
                if not self._full.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._full.wait(), self.flush_interval)
                await self.flush()
        finally:
            if self._ids or self._kept:
                await asyncio.shield(self.flush())

    async def flush(self) -> None:
        """Send every pending ack (and start mark) now; on a database error, keep them and retry
        with backoff."""
        delay = 0.05
        while self._ids or self._marks or self._kept:
            if self._kept:
                if not await self._send_kept(delay):
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                if not (self._ids or self._marks):
                    if not self._in_flight and not self._kept:
                        self._idle.set()
                    self._pending.clear()
                    self._full.clear()
                    continue
            batch = self.take()
            marks = self._take_marks()
            ids = batch.ids
            if batch.empty and not marks:  # another batch is in flight: its answer sets _pending again
                self._pending.clear()
                self._full.clear()
                return
            try:
                refused = await self._send(batch, marks)
            except PoolClosed:
                self._abandon(marks, len(ids))
                return
            except DATABASE_ERRORS as exc:
                self._instruments.transient_error()
                logger.warning("pgqueue: acknowledging %d jobs failed (%s); retrying in %.2fs", len(ids), exc, delay)
                for job_id, mark in marks.items():
                    self._marks.setdefault(job_id, mark)
                if not batch.empty:
                    self.give_back(batch)
                elif self._marks:
                    self._pending.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if not batch.empty:
                self.answered(ids, refused)

    async def _send(self, batch: AckBatch, marks: dict[uuid.UUID, tuple[int, asyncio.Future[bool]]]) -> list[uuid.UUID]:
        """Send one batch of acks, with the start marks when there are some; returns the ids the fence refused."""
        if not marks:
            return await self._store.ack(*batch)
        tokens = [token for token, _ in marks.values()]
        marked, refused = await self._store.mark_started(list(marks), tokens, acks=batch)
        self._answer(marks, set(marked))
        return refused

    async def _send_kept(self, delay: float) -> bool:
        """Send the acks that carry results; False when a database error asks for a retry after ``delay``."""
        try:
            await self._flush_kept()
        except PoolClosed:
            logger.error("pgqueue: %d finished jobs and their results could not be acknowledged: the "
                         "connection pool was closed before the worker stopped; they run again after "
                         "their leases expire", len(self._kept))
            self._kept.clear()
        except DATABASE_ERRORS as exc:
            self._instruments.transient_error()
            logger.warning("pgqueue: acknowledging %d jobs with their results failed (%s); retrying in "
                           "%.2fs", len(self._kept), exc, delay)
            return False
        return True

    def _abandon(self, marks: dict[uuid.UUID, tuple[int, asyncio.Future[bool]]], sent: int) -> None:
        """The client was closed under a running worker: no retry can succeed. The jobs (``sent`` of
        them in the failed batch, the rest still pending) run again once their leases expire
        (at-least-once), as after a crash."""
        logger.error("pgqueue: %d finished jobs could not be acknowledged: the connection pool was "
                     "closed before the worker stopped; they run again after their leases expire",
                     len(self._ids) + sent)
        self._ids, self._tokens, self._durations, self._waits = [], [], [], []
        self._ended.clear()
        self._answer({**marks, **self._marks}, set())
        self._marks.clear()
        self._pending.clear()
        if sent:
            self._in_flight -= 1
            self._sending -= sent
        if not self._in_flight:
            self._idle.set()
