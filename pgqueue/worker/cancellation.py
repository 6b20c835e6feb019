"""Cancellation of running jobs: ``pgqueue.cancel`` NOTIFYs channel ``pgqueue_cancel`` with the
job id, the notifier hands it here, and the handler running that job (or the buffered job
waiting for a slot) is stopped — once the database confirms the cancel.

A notification is a hint, never an authority: any role that may connect can ``pg_notify`` on
that channel. So a notification about a job held here is only queued for a check, and
:meth:`Cancellations.run` asks the database (``pgqueue.cancelled``, one call for a burst of
notifications) whether that attempt's job was really cancelled — its reservation ``(id, token)``
is gone and its latest failure is a cancellation — before it stops anything. A forged
notification costs one such look and changes nothing; one about a job not held here, or whose
payload is not a job id, costs nothing.

The cancelled job's row is already gone (deleted and recorded as cancelled in the same
statement), so any later ack, release, failure or lease renewal of the attempt is refused by
the fence. If the notification is missed (LISTEN off or reconnecting) or the check fails, the
heartbeat's next renewal is refused and the handler is stopped as a lost lease: polling is
the fallback.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

from pgqueue.job_context import JobContext
from pgqueue.store import Store
from pgqueue.worker.heartbeat import Leased

logger = logging.getLogger("pgqueue.worker")

#: At most one warning about unconfirmed cancel notifications per this many seconds (a flood of
#: forged notifications must not flood the log either).
WARN_EVERY = 60.0


class Cancellations:
    """The running handlers of one worker by job id, so a confirmed cancellation finds its handler.

    ``buffered(job_id)`` finds a job waiting in the fetcher's buffer (the worker wires it to
    :meth:`pgqueue.worker.fetcher.Fetcher.buffered_job`).
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._running: dict[uuid.UUID, JobContext] = {}
        #: The buffered job of an id (a :class:`pgqueue.worker.buffered.Prefetched`, leased), if any.
        self.buffered: Callable[[uuid.UUID], Leased | None] = lambda job_id: None
        #: Notified reservations (job id -> token) waiting for the database's answer.
        self._pending: dict[uuid.UUID, int] = {}
        self._notified = asyncio.Event()
        self._warned_at: float | None = None
        self._unwarned = 0
        #: Handlers stopped because their job was cancelled.
        self.cancelled = 0
        #: Cancel notifications about a job held here that the database did not confirm (forged,
        #: or the job was retried since): nothing was stopped.
        self.unconfirmed = 0

    def hold(self, context: JobContext) -> None:
        """A handler starts running ``context``'s job."""
        self._running[context.id] = context

    def drop(self, context: JobContext) -> None:
        """The handler of ``context`` is done."""
        if self._running.get(context.id) is context:
            del self._running[context.id]

    def notified(self, payload: str) -> None:
        """A ``pgqueue_cancel`` notification: if that job runs or waits here, check it with the database."""
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            return
        token = self._token_of(job_id)
        if token is not None:
            self._pending[job_id] = token
            self._notified.set()

    async def run(self) -> None:
        """Check the notified jobs with the database and stop those it confirms, until cancelled.

        One check is in flight at a time; notifications arriving meanwhile go in the next one.
        """
        while True:
            await self._notified.wait()
            self._notified.clear()
            pending, self._pending = self._pending, {}
            ids, tokens = list(pending), list(pending.values())
            try:
                confirmed = set(await self._store.cancelled(ids, tokens))
            except Exception as exc:  # whatever it was, this task must go on checking the next ones
                logger.warning("pgqueue: could not check %d cancel notification(s) with the database (%s: %s); "
                               "nothing was stopped: a cancelled job's handler is stopped at its next lease "
                               "renewal instead", len(ids), type(exc).__name__, exc)
                continue
            for job_id, token in pending.items():
                if job_id in confirmed:
                    self._stop(job_id, token)
                else:
                    self._unconfirmed(job_id)

    def _token_of(self, job_id: uuid.UUID) -> int | None:
        context = self._running.get(job_id)
        if context is not None:
            return context.token
        item = self.buffered(job_id)
        return None if item is None or item.finished else item.token

    def _stop(self, job_id: uuid.UUID, token: int) -> None:
        """The database recorded the cancel of attempt ``token``: stop its handler, or drop it from the buffer."""
        context = self._running.get(job_id)
        if context is not None and context.token == token:
            if context._cancel_requested():
                self.cancelled += 1
                logger.warning("pgqueue: job %s attempt %d was cancelled; its handler is being stopped",
                               job_id, context.attempts, extra=context.log_fields())
            return
        item = self.buffered(job_id)
        if item is not None and item.token == token and item._lease_lost():
            logger.warning("pgqueue: job %s was cancelled while waiting in the prefetch buffer; it is not run",
                           job_id, extra=item.log_fields())

    def _unconfirmed(self, job_id: uuid.UUID) -> None:
        self.unconfirmed += 1
        self._unwarned += 1
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY:
            return
        logger.warning("pgqueue: %d pgqueue_cancel notification(s) (the latest about job %s, which runs here) "
                       "were not confirmed by the database: that job was not cancelled, so nothing was stopped. "
                       "Any role that may connect can send such notifications; cancel with pgqueue.cancel",
                       self._unwarned, job_id)
        self._warned_at, self._unwarned = now, 0
