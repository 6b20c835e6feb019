"""The worker's row of ``pgqueue.workers``: registered at start, refreshed by the heartbeat, removed
on a clean stop (issue 29). Best effort: a registry the database refuses (a role without the grant,
a database unreachable for a moment) is logged and never stops the worker processing jobs."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version

from pgqueue.errors import QueueError
from pgqueue.store import Store, WorkerIdentity
from pgqueue.store.errors import DATABASE_ERRORS

logger = logging.getLogger("pgqueue.worker")


def installed_version() -> str:
    """The pgqueue version this worker runs (its distribution's), "unknown" from a bare checkout."""
    try:
        return version("pgqueue-py")
    except PackageNotFoundError:
        return "unknown"

__all__ = ["Registry"]

_FAILURES: tuple[type[Exception], ...] = (*DATABASE_ERRORS, QueueError)


class Registry:
    """One worker's registration. ``period``: how often it is refreshed (the heartbeat's period);
    the row is shown as gone after three periods without a refresh."""

    def __init__(self, store: Store, *, queues: Iterable[str], concurrency: int, prefetch: int,
                 period: float) -> None:
        self._store = store
        self.period = period
        self.identity = WorkerIdentity(
            id=uuid.uuid4(), host=socket.gethostname(), pid=os.getpid(), queues=tuple(queues),
            concurrency=concurrency, prefetch=prefetch, version=installed_version(), stale_after=3 * period)
        #: Whether the row is in the table, as far as this worker knows.
        self.registered = False

    @property
    def id(self) -> uuid.UUID:
        """The worker's id in ``pgqueue.workers``."""
        return self.identity.id

    async def register(self) -> None:
        """Add the row (logged, not raised, when the database refuses)."""
        try:
            await self._store.register_worker(self.identity)
        except _FAILURES as exc:
            logger.warning("pgqueue: this worker could not register in pgqueue.workers (%s); it runs on, but "
                           "the dashboard, queue:workers and pgqueue_worker_info do not list it", exc)
            return
        self.registered = True

    async def refresh(self, held: list[uuid.UUID]) -> None:
        """The heartbeat's part: now alive, holding ``held``; registers again if the row went missing."""
        try:
            if await self._store.refresh_worker(self.identity.id, held):
                return
        except _FAILURES as exc:
            logger.debug("pgqueue: refreshing this worker's row of pgqueue.workers failed (%s)", exc)
            return
        await self.register()

    async def deregister(self) -> None:
        """Remove the row (a clean stop)."""
        try:
            await self._store.deregister_worker(self.identity.id)
        except _FAILURES as exc:
            logger.warning("pgqueue: this worker could not remove its row of pgqueue.workers (%s); it is shown "
                           "as gone once stale", exc)
        self.registered = False

    async def run(self) -> None:
        """Refresh every ``period`` until cancelled: for a worker whose lease heartbeat is off."""
        while True:
            await asyncio.sleep(self.period)
            await self.refresh([])
