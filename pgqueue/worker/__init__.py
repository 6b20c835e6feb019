"""The worker: reserve, execute, complete. See :class:`Worker`."""

import logging

from pgqueue.redaction import LogRedaction
from pgqueue.worker.options import WorkerOptions
from pgqueue.worker.outcomes import Ended, Outcome
from pgqueue.worker.worker import Worker, WorkerStats

# The worker's log lines quote handlers' exceptions: every handler the application configures
# receives them with the values a job declares secret masked (pgqueue.redaction.log_fields).
logging.getLogger("pgqueue.worker").addFilter(LogRedaction())

__all__ = ["Ended", "Outcome", "Worker", "WorkerOptions", "WorkerStats"]
