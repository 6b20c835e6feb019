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


class WaitingJobs:
    """Issue 28, slot handover: per queue, the reserved jobs granted beyond its concurrency limit's
    free slots (:attr:`Reservation.waiting`), oldest first.

    They do not count in the limit. One starts only in the slot of one of this worker's jobs of the
    same queue that ended with an ack still pending, which hands the slot over in the same
    transaction (:meth:`pgqueue.worker.completer.Completer.hand_over`); so under a limit a worker
    runs its queue's jobs back to back, one reservation per prefetch buffer instead of one per slot
    that frees (a reservation's round trip and the worker's handling no longer take turns). A
    queue whose handover the database refused (paused, a limit lowered, a lease lost) is
    :attr:`off` until a reservation grants slots in it again. The worker asks for waiting jobs
    (:meth:`budget`) only in a queue where it holds running jobs or whose jobs ended since the last
    reservation (their acks ride with it and free their slots in its transaction), so a queue
    whose slots other workers hold gives it none it could not start.
    """

    __slots__ = ("_by_queue", "count", "ended", "off")

    def __init__(self) -> None:
        self._by_queue: dict[str, collections.deque[Prefetched]] = {}
        #: Waiting jobs held, all queues.
        self.count = 0
        #: Queues whose last running job ended since the last reservation (its ack rides with the next).
        self.ended: collections.Counter[str] = collections.Counter()
        #: Queues where the database refused a handover.
        self.off: set[str] = set()

    def __iter__(self) -> Iterator[Prefetched]:
        for items in list(self._by_queue.values()):
            yield from list(items)

    def has(self, queue: str) -> bool:
        return queue in self._by_queue

    def add(self, item: Prefetched) -> None:
        self._by_queue.setdefault(item.reservation.queue, collections.deque()).append(item)
        self.count += 1

    def pop(self, queue: str) -> Prefetched | None:
        """The queue's oldest waiting job, taken out (None: none)."""
        items = self._by_queue.get(queue)
        if not items:
            return None
        item = items.popleft()
        self.count -= 1
        if not items:
            del self._by_queue[queue]
        return item

    def put_back(self, item: Prefetched) -> None:
        """A job :meth:`pop` gave that did not start: first again."""
        self._by_queue.setdefault(item.reservation.queue, collections.deque()).appendleft(item)
        self.count += 1

    def take_queue(self, queue: str) -> list[Prefetched]:
        """Every waiting job of ``queue``, taken out."""
        items = list(self._by_queue.pop(queue, ()))
        self.count -= len(items)
        return items

    def queues(self) -> list[str]:
        return list(self._by_queue)

    def budget(self, queues: list[str], running: collections.Counter[str], room: int) -> list[int] | None:
        """The ``waiting`` counts of the next reservation, one per queue (None: none anywhere); the
        ended counts start again."""
        counts = [room if queue not in self.off and (running[queue] > 0 or self.ended[queue] > 0) else 0
                  for queue in queues]
        self.ended.clear()
        return counts if any(counts) else None
