"""The inline mode: a dispatched job runs at once, in the dispatching call, instead of being stored.

For tests (Celery's ``task_always_eager``): :func:`pgqueue.testing.inline` turns it on for a client.
A connection configured with ``driver = "sync"`` (and the built-in ``sync`` connection) runs its jobs
this way too; that setting is deprecated and goes in the release after 0.2.

One attempt, now: the handler runs in the caller's task (a plain ``def handle`` in a thread with a
:class:`~pgqueue.context.SyncJobContext`, as a worker runs it), its exception propagates to the caller
of dispatch, and a failure is recorded in ``pgqueue.failed_jobs`` of the ``database`` connection, if
one is configured. Nothing goes to ``pgqueue.jobs``: the job runs whether or not the caller's
transaction (``conn=``) commits later. A delay, ``release()`` and ``snooze()`` are refused: they need
a stored job. The client hands a dispatch over here through one hook, ``Client._inline``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from pgqueue.config import DRIVER_SYNC_DEPRECATED, warn_deprecated
from pgqueue.context import SyncJobContext
from pgqueue.envelope import Envelope
from pgqueue.errors import QueueDispatchError, QueueStorageError
from pgqueue.failures import describe
from pgqueue.job_context import JobContext
from pgqueue.jobs import Job, has_sync_handle
from pgqueue.store import Store, UniqueDispatch, record_failure_on

logger = logging.getLogger("pgqueue")



def warn_driver_sync(connection: str) -> None:
    """The DeprecationWarning of a dispatch to a connection that uses ``driver = "sync"``, pointing at
    the dispatching line."""
    warn_deprecated(f"connection {connection!r}: {DRIVER_SYNC_DEPRECATED}")


class InlineRunner:
    """Runs dispatched jobs at once for one client (see the module docstring).

    ``sync_connection`` is the name of the connection with the deprecated ``driver = "sync"`` whose
    job this runs, None in the inline mode: that connection keeps its old limits (no unique keys, no
    batches). ``store`` opens the store of the database failures are recorded in, whose DSN is
    ``dsn`` (None: failures are not recorded, they only propagate).
    """

    def __init__(self, sync_connection: str | None, store: Callable[[], Awaitable[Store]], dsn: str | None) -> None:
        self.sync_connection = sync_connection
        #: What runs the job, as the errors name it.
        self.where = ("the inline mode (pgqueue.testing.inline)" if sync_connection is None
                      else f"the sync connection {sync_connection!r}")
        self._store = store
        self._dsn = dsn

    def check_batch(self, job_name: str) -> None:
        """Refuse a job of ``dispatch_many`` on a ``driver = "sync"`` connection (the inline mode runs
        batches one job after the other, before this is asked)."""
        if self.sync_connection is not None:
            raise QueueDispatchError(f"dispatch_many cannot send job {job_name!r} to {self.where}; "
                                     "dispatch sync jobs one by one")

    async def dispatch(self, job: Job, envelope: Envelope, delay: float) -> uuid.UUID:
        """Run ``job`` now in this task; returns its envelope's id."""
        await self._run(job, envelope, delay)
        return envelope.id

    def dispatch_blocking(self, job: Job, envelope: Envelope, delay: float) -> uuid.UUID:
        """Run ``job`` now from synchronous code (``dispatch_sync``), in an event loop of its own."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise QueueDispatchError(
                f"job {envelope.name!r}: dispatch_sync() to {self.where} runs the job in a loop of its own "
                "and cannot do so inside a running event loop; use `await dispatch()`"
            )
        # A loop of its own for this call: nothing that outlives it (the client's pool) may be used.
        asyncio.run(self._run(job, envelope, delay, own_loop=True))
        return envelope.id

    async def dispatch_unique(self, job: Job, envelope: Envelope, delay: float) -> UniqueDispatch:
        """A unique job in the inline mode: it runs (nothing is stored, so no job can hold its key)."""
        if self.sync_connection is not None:
            raise QueueDispatchError(f"job {envelope.name!r}: unique keys need a database connection; "
                                     f"{self.sync_connection!r} runs jobs at dispatch")
        await self._run(job, envelope, delay)
        return UniqueDispatch(id=envelope.id, duplicate=False)

    async def _run(self, job: Job, envelope: Envelope, delay: float, *, own_loop: bool = False) -> None:
        if delay:
            raise QueueDispatchError(
                f"job {envelope.name!r}: {self.where} runs jobs at dispatch and cannot delay them; "
                "dispatch to a database connection instead"
            )
        decisions = _InlineDecisions(self, envelope, own_loop=own_loop)
        context = JobContext(job_id=envelope.id, token=0, attempts=1, tries=1, queue=envelope.queue,
                             connection=envelope.connection, lease_seconds_left=envelope.timeout,
                             decisions=decisions)
        # Round-trip the args through JSON and from_args so a job behaves as it would after a real queue.
        runnable = type(job).from_args(json.loads(json.dumps(envelope.args)))
        try:
            async with asyncio.timeout(envelope.timeout):
                if has_sync_handle(type(runnable)):
                    # A plain `def handle` gets the blocking context, in a thread as a worker runs it,
                    # so its decisions can wait on this loop.
                    handle: Callable[[SyncJobContext], Any] = runnable.handle  # type: ignore[assignment]
                    await asyncio.to_thread(handle, SyncJobContext(context, asyncio.get_running_loop()))
                else:
                    await runnable.handle(context)
        except QueueDispatchError:
            raise
        except BaseException as exc:
            if isinstance(exc, TimeoutError | asyncio.CancelledError):
                # A sync handler's thread cannot be stopped and runs on: context.cancelled asks it to.
                context.mark_cancelled()
            # Every end is recorded with its cause (SystemExit, CancelledError, ... too), then
            # propagates to the caller, as the inline mode promises.
            await decisions.record(exc, "exception", _inline_note(exc))
            raise
        if context.failure is not None:
            raise context.failure

    async def record(self, envelope: Envelope, exception: str | None, message: str, trace: str | None,
                     reason: str, *, own_loop: bool) -> None:
        """Record a failure of an inline job (one attempt) in ``pgqueue.failed_jobs``, if a database is set."""
        dsn = self._dsn
        if dsn is None:
            return
        text = json.dumps(envelope.to_data())
        try:
            if own_loop:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await record_failure_on(conn, text, 1, exception, message, trace, reason)
                return
            store = await self._store()
            await store.record_failure(text, 1, exception, message, trace, reason)
        except (psycopg.Error, QueueStorageError) as exc:
            logger.error("pgqueue: could not record the failure of inline job %s (%s): %s",
                         envelope.id, envelope.name, exc)


class _InlineDecisions:
    """Decisions of a job run inline: there is no reservation, only failures to record."""

    def __init__(self, runner: InlineRunner, envelope: Envelope, *, own_loop: bool) -> None:
        self._runner = runner
        self._envelope = envelope
        self._own_loop = own_loop

    async def ack(self, job_id: uuid.UUID, token: int) -> bool:
        return True

    async def release(self, job_id: uuid.UUID, token: int, delay: float) -> bool:
        raise QueueDispatchError(
            f"job {self._envelope.name!r}: release() is not available on {self._runner.where} "
            "(the job runs once, at dispatch)"
        )

    async def fail(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                   traceback_text: str | None, reason: str) -> bool:
        await self._runner.record(self._envelope, exception, message, traceback_text, reason,
                                  own_loop=self._own_loop)
        return True

    async def extend(self, job_id: uuid.UUID, token: int, seconds: float) -> float | None:
        return seconds

    async def snooze(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        raise QueueDispatchError(
            f"job {self._envelope.name!r}: snooze() is not available on {self._runner.where} "
            "(the job runs once, at dispatch)"
        )

    async def backpressure(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        raise QueueDispatchError(
            f"job {self._envelope.name!r}: backpressure is not available on {self._runner.where} "
            "(the job runs once, at dispatch)"
        )

    async def record(self, error: BaseException, reason: str, note: str | None = None) -> None:
        exception, message, trace = describe(error, note)
        await self._runner.record(self._envelope, exception, message, trace, reason, own_loop=self._own_loop)


def _inline_note(error: BaseException) -> str | None:
    """The message an inline failure records for a BaseException that is not an Exception."""
    if isinstance(error, Exception):
        return None
    task = asyncio.current_task()
    if isinstance(error, asyncio.CancelledError) and task is not None and task.cancelling():
        return "the task that dispatched the job was cancelled while the job ran; it did not finish"
    try:
        raised = repr(error)
    except Exception:  # a broken __repr__ must not lose the failure
        raised = type(error).__name__
    return f"the handler raised {raised}; it propagates to the caller of dispatch"
