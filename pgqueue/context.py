"""The contexts a handler receives: :class:`JobContext` (``pgqueue/job_context.py``) for an async
handler, :class:`SyncJobContext`, its blocking face, for a sync one."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import psycopg

from pgqueue.errors import QueueConfigurationError
from pgqueue.job_context import PROGRESS_INTERVAL, PROGRESS_NOTE_BYTES, Decisions, JobContext
from pgqueue.store import BatchState, Store, ack_in_transaction_sync, begin_transaction_sync

__all__ = ["PROGRESS_INTERVAL", "PROGRESS_NOTE_BYTES", "Decisions", "JobContext", "SyncJobContext"]

_T = TypeVar("_T")


class SyncJobContext:
    """What a sync handler (a plain ``def handle``) receives: :class:`JobContext`'s facts and
    decisions, as blocking methods with the same names, callable from the handler's thread.

    Each decision runs on the worker's event loop and blocks the calling thread until the
    database answered; errors (``QueueLeaseError``, ...) are raised in the thread as they
    would be in an async handler. Poll :attr:`cancelled` in long loops: a thread cannot be
    interrupted, so the worker can only ask it to stop.
    """

    __slots__ = ("_context", "_loop")

    def __init__(self, context: JobContext, loop: asyncio.AbstractEventLoop) -> None:
        self._context = context
        self._loop = loop

    @property
    def context(self) -> JobContext:
        """The async context behind this facade (its methods are for the event loop's thread)."""
        return self._context

    @property
    def id(self) -> uuid.UUID:
        """The job id."""
        return self._context.id

    @property
    def token(self) -> int:
        """This reservation's fencing token."""
        return self._context.token

    @property
    def attempts(self) -> int:
        """Which attempt this is, 1-based."""
        return self._context.attempts

    @property
    def tries(self) -> int:
        """How many attempts the job may have in all."""
        return self._context.tries

    @property
    def queue(self) -> str:
        """The queue the job was reserved from."""
        return self._context.queue

    @property
    def connection(self) -> str:
        """The connection name the job was dispatched to."""
        return self._context.connection

    @property
    def finished(self) -> bool:
        """Whether a decision has ended this reservation (or the lease was found lost)."""
        return self._context.finished

    @property
    def decision(self) -> str | None:
        """``released``, ``snoozed``, ``acked``, ``failed``, ``lost``, ``cancelled``, ``given_back`` (the
        worker's forced stop interrupted the attempt) or None while undecided."""
        return self._context.decision

    @property
    def failure(self) -> BaseException | None:
        """The error given to :meth:`fail`, if the handler failed the job."""
        return self._context.failure

    @property
    def lease_expires_in(self) -> float:
        """Seconds until the lease ends."""
        return self._context.lease_expires_in

    @property
    def cancelled(self) -> bool:
        """True once the worker gave up on this execution (timeout, lost lease, forced stop):
        return as soon as you can; decisions are refused from then on."""
        return self._context.cancelled

    def _call(self, make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("SyncJobContext methods block: call them from the sync handler's thread, "
                               "or use the async JobContext (.context) on the event loop")
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result()

    def release(self, delay: float = 0.0) -> None:
        """Put the job back on its queue, available again after ``delay`` seconds."""
        self._call(lambda: self._context.release(delay))

    def snooze(self, delay: float) -> None:
        """Run the job again after ``delay`` seconds without using up a try (see :meth:`JobContext.snooze`)."""
        self._call(lambda: self._context.snooze(delay))

    def backpressure(self, retry_after: float = 1.0) -> None:
        """The downstream is overloaded: run again later without using up a try, halving the queue's
        adaptive limit (see :meth:`JobContext.backpressure`)."""
        self._call(lambda: self._context.backpressure(retry_after))

    def ack(self) -> None:
        """Remove the job without running it further (it counts as done)."""
        self._call(self._context.ack)

    def fail(self, error: BaseException | str) -> None:
        """Fail the job now, without retries: it goes to failed_jobs with this error."""
        self._call(lambda: self._context.fail(error))

    def extend(self, seconds: float) -> float:
        """Renew the lease to end ``seconds`` from now; returns the seconds left."""
        return self._call(lambda: self._context.extend(seconds))

    def progress(self, fraction: float | None = None, note: Any = None) -> bool:
        """:meth:`JobContext.progress`, blocking."""
        return self._call(lambda: self._context.progress(fraction, note))

    def parent_results(self) -> dict[uuid.UUID, Any]:
        """:meth:`JobContext.parent_results`, blocking."""
        return self._call(self._context.parent_results)

    def batch(self) -> BatchState | None:
        """:meth:`JobContext.batch`, blocking."""
        return self._call(self._context.batch)

    def batch_results(self) -> dict[uuid.UUID, Any]:
        """:meth:`JobContext.batch_results`, blocking."""
        return self._call(self._context.batch_results)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """:meth:`JobContext.transaction` for a sync handler: a blocking connection (opened for this
        block on the worker's database) whose transaction also carries the job's fenced ack; the
        same rules (one block per attempt, the block owns its transaction)."""
        context = self._context
        pool = context._pool
        if pool is None:
            raise QueueConfigurationError(
                f"job {context.id}: context.transaction() needs a worker of a database connection; "
                "nothing was written")
        context._open_transaction()
        try:
            conninfo = pool.conninfo if isinstance(pool.conninfo, str) else ""
            kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
            with psycopg.connect(conninfo, **{**kwargs, "autocommit": True}) as conn:
                began = begin_transaction_sync(conn)
                try:
                    yield conn
                    context._check_block(conn.info.transaction_status)
                    context._claim("ack", "acked")
                    try:
                        if context.result_ttl > 0:
                            context._ack_answer(Store.ack_in_transaction_kept_sync(conn, context.id, context.token,
                                                                                   began, context.result_ttl))
                        else:
                            context._ack_answer(ack_in_transaction_sync(conn, context.id, context.token, began))
                        conn.commit()
                        context.result_pending = context.result_ttl > 0
                    except BaseException:
                        if context._decided == "acked":
                            context._decided = None
                        raise
                except BaseException:
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
                    raise
        finally:
            context._transaction_open = False

    def __repr__(self) -> str:
        return f"Sync{self._context!r}"

