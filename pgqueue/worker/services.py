"""Services: the background parts of a worker, started and stopped in one place.

The completer, the notifier, the cancellations, the heartbeat, the scheduler, the table
maintenance and the queue depth sampler each run one loop (:meth:`Service.run`) until cancelled.
A :class:`Services` group starts them as tasks and stops them — in the order the worker's drain
needs, or all that are left when the group closes — so that no task outlives the worker and none
is forgotten (River's ``startstop``, asyncio's ``TaskGroup``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Protocol

logger = logging.getLogger("pgqueue.worker")

__all__ = ["Service", "Services", "watch_stop"]


class Service(Protocol):
    """A background part of a worker: :meth:`run` loops until its task is cancelled."""

    async def run(self) -> None:
        """Do the service's work until cancelled (a service handles its own errors and retries)."""
        ...


class Services:
    """Runs services as tasks: ``async with Services() as services: services.start(a, b) ...``.

    :meth:`stop` cancels the named services and waits for each to end, in the order given; on
    leaving the block every service still running is stopped, in the reverse order of its start.
    A service that ended with an error (it should not) is logged when stopped; stopping never raises
    it, so the others still stop.
    """

    def __init__(self) -> None:
        self._tasks: dict[int, tuple[Service, asyncio.Task[None]]] = {}

    def start(self, *services: Service | None) -> None:
        """Start each service (None, a service that is off, is skipped) in a task of its own."""
        for service in services:
            if service is None or id(service) in self._tasks:
                continue
            name = f"pgqueue-{type(service).__name__.lower()}"
            self._tasks[id(service)] = (service, asyncio.create_task(service.run(), name=name))

    def running(self, service: Service) -> bool:
        """Whether ``service`` was started here and not stopped yet."""
        return id(service) in self._tasks

    async def stop(self, *services: Service | None) -> None:
        """Stop each service that runs here (in the order given: each has ended before the next is
        cancelled); None and services not running are skipped."""
        for service in services:
            if service is None:
                continue
            entry = self._tasks.pop(id(service), None)
            if entry is None:
                continue
            task = entry[1]
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception:
                    logger.exception("pgqueue: the worker's %s ended with an error", task.get_name())

    async def __aenter__(self) -> Services:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        # Shielded: the worker's run() may itself be cancelled; its services must still stop.
        remaining = [service for service, _ in reversed(self._tasks.values())]
        await asyncio.shield(self.stop(*remaining))


def _stacks(skip: asyncio.Task[object] | None) -> str:
    """Where each task of the loop is (but ``skip``), as ``print_stack`` shows it."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        if task is not skip and not task.done():
            task.print_stack(limit=8, file=out)
    return out.getvalue()


@contextlib.asynccontextmanager
async def watch_stop(what: str, *, after: float, every: float = 30.0) -> AsyncIterator[None]:
    """Log a warning, with where every task is, when the block has run ``after`` seconds (then every
    ``every`` seconds): a stop that hangs names what it waits for instead of saying nothing.
    Never stops the block itself."""
    started = time.monotonic()

    async def report() -> None:
        await asyncio.sleep(after)
        while True:
            logger.warning("pgqueue: %s has taken %.0fs so far; its tasks are at:\n%s", what,
                           time.monotonic() - started, _stacks(asyncio.current_task()))
            await asyncio.sleep(every)

    watchdog = asyncio.create_task(report(), name="pgqueue-stop-watchdog")
    try:
        yield
    finally:
        watchdog.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watchdog
