"""The fetcher's reserved jobs not started yet: the prefetch buffer's items, and the jobs waiting for a slot."""

from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator

from pgqueue.store import Reservation


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


class Heirs:
    """Issue 28, slot heirs: the reserved jobs granted beyond a queue's concurrency limit's free slots
    as heirs in slots this worker holds (:attr:`Reservation.heir_of`: the job whose reservation took
    the slot), per slot in the order granted.

    The database counts a slot as one from the reservation that took it until the last of its jobs
    ends, however each ends, with no write of theirs; the worker runs a slot's jobs one at a time,
    each heir as the job before it in the slot ends (:meth:`pgqueue.worker.fetcher.Fetcher._finished`).
    So under a limit a worker runs its queue's jobs back to back, one reservation for many of them,
    instead of one reservation per slot that frees.
    """

    __slots__ = ("_by_slot", "count")

    def __init__(self) -> None:
        self._by_slot: dict[uuid.UUID, collections.deque[Prefetched]] = {}
        #: Heirs held, all slots.
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Prefetched]:
        for items in list(self._by_slot.values()):
            yield from list(items)

    def slots(self) -> list[uuid.UUID]:
        """The slots with heirs waiting."""
        return list(self._by_slot)

    def queued(self, slot: uuid.UUID) -> int:
        items = self._by_slot.get(slot)
        return len(items) if items else 0

    def add(self, slot: uuid.UUID, item: Prefetched) -> None:
        """``item`` runs in ``slot`` after the heirs already there."""
        self._by_slot.setdefault(slot, collections.deque()).append(item)
        self.count += 1

    def pop(self, slot: uuid.UUID) -> Prefetched | None:
        """The next heir of ``slot``, taken out (None: none)."""
        items = self._by_slot.get(slot)
        if not items:
            return None
        item = items.popleft()
        self.count -= 1
        if not items:
            del self._by_slot[slot]
        return item

    def take_all(self) -> list[Prefetched]:
        items = [item for queue in self._by_slot.values() for item in queue]
        self._by_slot, self.count = {}, 0
        return items
