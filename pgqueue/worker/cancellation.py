"""Cancellation of running jobs: ``pgqueue.cancel`` NOTIFYs channel ``pgqueue_cancel`` with the
job id, the notifier hands it here, and the handler running that job is stopped.

The job's row is already gone (deleted and recorded as cancelled in the same statement), so
any later ack, release, failure or lease renewal of the attempt is refused by the fence. If
the notification is missed (LISTEN off or reconnecting), the heartbeat's next renewal is
refused and the handler is stopped as a lost lease: polling is the fallback.
"""

from __future__ import annotations

import logging
import uuid

from pgqueue.context import JobContext

logger = logging.getLogger("pgqueue.worker")


class Cancellations:
    """The running handlers of one worker by job id, so a cancellation finds its handler."""

    def __init__(self) -> None:
        self._running: dict[uuid.UUID, JobContext] = {}
        #: Handlers stopped because their job was cancelled.
        self.cancelled = 0

    def hold(self, context: JobContext) -> None:
        """A handler starts running ``context``'s job."""
        self._running[context.id] = context

    def drop(self, context: JobContext) -> None:
        """The handler of ``context`` is done."""
        if self._running.get(context.id) is context:
            del self._running[context.id]

    def cancel(self, payload: str) -> None:
        """A ``pgqueue_cancel`` notification: stop the handler of that job, if it runs here."""
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            return
        context = self._running.get(job_id)
        if context is not None and context._cancel_requested():
            self.cancelled += 1
            logger.warning("pgqueue: job %s attempt %d was cancelled; its handler is being stopped",
                           job_id, context.attempts, extra=context.log_fields())
