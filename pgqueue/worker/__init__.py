"""The worker: reserve, execute, complete. See :class:`Worker`."""

from pgqueue.worker.worker import Worker, WorkerStats

__all__ = ["Worker", "WorkerStats"]
