"""The fetcher's waits: for slots to gather, and, with nothing to reserve, for a reason to look again."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from pgqueue.store import Store
from pgqueue.store.errors import is_transient

logger = logging.getLogger("pgqueue.worker")


class FetcherWaits:
    """The waits of :class:`pgqueue.worker.fetcher.Fetcher`, which provides the state they read."""

    _store: Store
    queues: list[str]
    concurrency: int
    poll_interval: float
    fetch_cooldown: float
    stopping: bool
    running: dict[asyncio.Task[bool], str]
    idle: asyncio.Event
    _wakeup: asyncio.Event
    _rescheduled: asyncio.Event
    _slot_free: asyncio.Event
    _ended_since_reserve: bool

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
