"""The workers registry, ``pgqueue.workers``: each worker's row, registered at its start, refreshed
by its heartbeat, removed on a clean stop (``pgqueue/worker/registry.py`` drives it), and read
back for the dashboard, ``queue:workers`` and the metrics."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """Who a worker is, as it registers in ``pgqueue.workers``."""

    id: uuid.UUID
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    prefetch: int
    version: str
    #: Seconds without a heartbeat after which the worker is shown as gone.
    stale_after: float


@dataclass(frozen=True, slots=True)
class RegisteredWorker:
    """A row of ``pgqueue.workers`` as read back (``registered_workers.sql``)."""

    id: uuid.UUID
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    prefetch: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    up_seconds: float
    silent_seconds: float
    #: No heartbeat for ``stale_after`` seconds: killed, hung or cut off from the database.
    gone: bool
    #: The jobs it held at its last heartbeat still reserved: dicts of id, queue, name, attempts, seconds.
    jobs: list[dict[str, Any]]

    def to_data(self) -> dict[str, Any]:
        """JSON-ready, for ``queue:workers --json``."""
        return {"id": str(self.id), "host": self.host, "pid": self.pid, "queues": self.queues,
                "concurrency": self.concurrency, "prefetch": self.prefetch, "version": self.version,
                "started_at": self.started_at.isoformat(), "heartbeat_at": self.heartbeat_at.isoformat(),
                "gone": self.gone, "jobs": self.jobs}


class WorkerStatements(Pooled):
    """The rows of ``pgqueue.workers``."""

    __slots__ = ()

    async def register_worker(self, worker: WorkerIdentity) -> None:
        """Add (or renew) this worker's row of ``pgqueue.workers``."""
        with storage_errors("registering the worker"):
            await self._run("register_worker", {
                "id": worker.id, "host": worker.host, "pid": worker.pid, "queues": list(worker.queues),
                "concurrency": worker.concurrency, "prefetch": worker.prefetch, "version": worker.version,
                "stale_after": worker.stale_after})

    async def refresh_worker(self, worker_id: uuid.UUID, held: list[uuid.UUID]) -> bool:
        """Mark the worker alive now, holding ``held``; False if its row is gone (register again)."""
        with storage_errors("refreshing the worker's registration"):
            return bool(await self._value("refresh_worker", {"id": worker_id, "held": held}))

    async def deregister_worker(self, worker_id: uuid.UUID) -> bool:
        """Remove the worker's row (a clean stop); False if it had none."""
        with storage_errors("deregistering the worker"):
            return bool(await self._value("deregister_worker", {"id": worker_id}))

    async def registered_workers(self) -> list[RegisteredWorker]:
        """The rows of ``pgqueue.workers``, longest running first, with the jobs each holds."""
        with storage_errors("listing the registered workers"):
            return [RegisteredWorker(*row) for row in await self._rows("registered_workers")]
