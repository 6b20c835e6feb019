"""JobContext: what a handler receives, and the decisions it can take about its job."""

from __future__ import annotations

import time
import traceback
import uuid
from typing import Protocol

from pgqueue.errors import QueueLeaseError


class Settler(Protocol):
    """Carries a handler's decisions to storage. Each call returns whether the fence matched."""

    async def delete(self, job_id: uuid.UUID, token: int) -> bool: ...

    async def release(self, job_id: uuid.UUID, token: int, delay: float) -> bool: ...

    async def fail(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                   traceback_text: str | None, reason: str) -> bool: ...

    async def extend(self, job_id: uuid.UUID, token: int, seconds: float) -> float | None: ...


def describe(error: BaseException) -> tuple[str, str, str]:
    """(module-qualified class, message, full traceback) of an exception, as stored in failed_jobs."""
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    text = "".join(traceback.format_exception(kind, error, error.__traceback__))
    return name, str(error), text


class JobContext:
    """One execution of one job: read-only facts and at most one decision.

    Decisions (``release``, ``delete``, ``fail``) settle the reservation; after one has
    completed, any further one raises :class:`~pgqueue.QueueLeaseError`, and so does a
    decision the fence refuses because the lease was lost. Of two tasks racing to decide,
    exactly one wins. ``extend`` renews the lease and may be called any number of times.
    A handler that returns without a decision is acknowledged.
    """

    __slots__ = (
        "_attempts",
        "_connection",
        "_deadline",
        "_decided",
        "_failure",
        "_id",
        "_queue",
        "_settler",
        "_token",
        "max_tries",
    )

    def __init__(self, *, job_id: uuid.UUID, token: int, attempts: int, max_tries: int, queue: str,
                 connection: str, lease_seconds_left: float, settler: Settler) -> None:
        self._id = job_id
        self._token = token
        self._attempts = attempts
        self.max_tries = max_tries
        self._queue = queue
        self._connection = connection
        self._deadline = time.monotonic() + lease_seconds_left
        self._settler = settler
        self._decided: str | None = None
        self._failure: BaseException | None = None

    # ------------------------------------------------------------- read-only facts
    @property
    def id(self) -> uuid.UUID:
        """The job id (the same for every attempt and after a retry of a failure)."""
        return self._id

    @property
    def token(self) -> int:
        """This reservation's fencing token."""
        return self._token

    @property
    def attempts(self) -> int:
        """Which attempt this is, 1-based."""
        return self._attempts

    @property
    def queue(self) -> str:
        """The queue the job was reserved from."""
        return self._queue

    @property
    def connection(self) -> str:
        """The connection name the job was dispatched to."""
        return self._connection

    @property
    def finished(self) -> bool:
        """Whether a decision has settled this reservation (or the lease was found lost)."""
        return self._decided is not None

    @property
    def decision(self) -> str | None:
        """``released``, ``deleted``, ``failed``, ``lost`` or None while undecided."""
        return self._decided

    @property
    def failure(self) -> BaseException | None:
        """The error given to :meth:`fail`, if the handler failed the job."""
        return self._failure

    @property
    def lease_expires_in(self) -> float:
        """Seconds until the lease ends, measured from the expiry the database returned."""
        return self._deadline - time.monotonic()

    # ------------------------------------------------------------------ decisions
    def _claim(self, verb: str, decision: str) -> None:
        if self._decided is not None:
            raise QueueLeaseError(
                f"job {self._id} attempt {self._attempts}: cannot {verb} — the reservation was already "
                f"{self._decided}"
            )
        self._decided = decision  # set before any await: of racing tasks, the first one wins

    def _refused(self, decision: str) -> QueueLeaseError:
        self._decided = "lost"
        return QueueLeaseError(
            f"job {self._id} attempt {self._attempts}: {decision} refused — the lease was lost (it expired "
            "and the job was reserved again, or the job was cleared); nothing was changed"
        )

    async def release(self, delay: float = 0.0) -> None:
        """Put the job back on its queue, available again after ``delay`` seconds. The attempt counts."""
        self._claim("release", "released")
        if not await self._settler.release(self._id, self._token, delay):
            raise self._refused("release")

    async def delete(self) -> None:
        """Remove the job without running it further (it counts as done)."""
        self._claim("delete", "deleted")
        if not await self._settler.delete(self._id, self._token):
            raise self._refused("delete")

    async def fail(self, error: BaseException | str) -> None:
        """Fail the job now, without retries: it goes to failed_jobs with this error."""
        self._claim("fail", "failed")
        if isinstance(error, str):
            error = RuntimeError(error)
        self._failure = error
        exception, message, trace = describe(error)
        if not await self._settler.fail(self._id, self._token, exception, message, trace, "failed_by_handler"):
            raise self._refused("fail")

    async def extend(self, seconds: float) -> float:
        """Renew the lease to end ``seconds`` from now; returns the seconds left."""
        if self._decided is not None:
            raise QueueLeaseError(f"job {self._id}: cannot extend — the reservation was already {self._decided}")
        left = await self._settler.extend(self._id, self._token, seconds)
        if left is None:
            raise self._refused("extend")
        self._deadline = time.monotonic() + left
        return left

    def _settle_internally(self, decision: str) -> bool:
        """For the worker: claim a decision if none was taken yet; False if the handler decided."""
        if self._decided is not None:
            return False
        self._decided = decision
        return True

    def __repr__(self) -> str:
        return (f"JobContext(id={self._id}, attempts={self._attempts}, queue={self._queue!r}, "
                f"decision={self._decided!r})")
