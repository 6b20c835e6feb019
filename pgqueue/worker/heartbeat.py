"""The lease heartbeat: renews the leases of a worker's running handlers, one statement per tick."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from pgqueue.store import Store
from pgqueue.store.errors import DATABASE_ERRORS

if TYPE_CHECKING:
    from pgqueue.worker.registry import Registry

logger = logging.getLogger("pgqueue.worker")


class Leased(Protocol):
    """What the heartbeat renews: a running handler's context, or a job waiting in the prefetch buffer."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def token(self) -> int: ...

    @property
    def attempts(self) -> int: ...

    @property
    def finished(self) -> bool: ...

    def log_fields(self) -> dict[str, Any]: ...

    def _lease_renewed(self, ends_at: float) -> None: ...

    def _lease_lost(self) -> bool: ...


class Heartbeat:
    """Every ``period`` seconds, renews the lease of every held handler (and prefetched job) to end ``lease``
    seconds later, with one fenced call of ``pgqueue.heartbeat`` for all of them.

    A renewed lease moves the handler's time limit (``context._lease_renewed``). A renewal
    the fence refuses (the lease expired and the job was reserved again, or it was cleared)
    marks the context lost, which stops its handler at once. A tick that fails (database
    unreachable, pool exhausted) changes nothing: each handler keeps the time limit of its
    last renewal, ``lease_margin`` before its lease ends, so a handler whose lease cannot be
    renewed is stopped before anyone else can reserve its job.

    With ``period = (lease - lease_margin) / 3`` (what the worker uses) two ticks in a
    row may fail before a handler is stopped.
    """

    def __init__(self, store: Store, *, lease: float, period: float, registry: Registry | None = None) -> None:
        self._store = store
        #: The worker's row of pgqueue.workers, refreshed every tick (issue 29); ticks then run when idle too.
        self.registry = registry
        self.lease = lease
        self.period = period
        self._held: dict[Leased, None] = {}
        self._holding = asyncio.Event()
        #: Ticks that renewed (or tried to renew) at least one lease.
        self.ticks = 0
        #: Renewals the fence refused (the handler was stopped and counted lost).
        self.refused = 0
        #: Ticks that failed (database error); the handlers' own time limits protect their leases.
        self.failures = 0

    def hold(self, context: Leased) -> None:
        """Renew this handler's (or buffered job's) lease from the next tick on, until :meth:`drop`."""
        self._held[context] = None
        self._holding.set()

    def drop(self, context: Leased) -> None:
        """Stop renewing this handler's lease (it finished)."""
        self._held.pop(context, None)

    @property
    def held(self) -> int:
        """Handlers whose leases are being renewed."""
        return len(self._held)

    async def run(self) -> None:
        """Tick until cancelled."""
        while True:
            if not self._held and self.registry is None:
                self._holding.clear()
                await self._holding.wait()
            await asyncio.sleep(self.period)
            await self.tick()
            if self.registry is not None:  # after the renewal, which must not wait for it
                await self.registry.refresh([c.id for c in self._held if not c.finished])

    async def tick(self) -> None:
        """Renew every held lease now (one statement)."""
        contexts = [c for c in self._held if not c.finished]
        if not contexts:
            return
        sent = time.monotonic()
        try:
            rows = await self._store.heartbeat([c.id for c in contexts], [c.token for c in contexts], self.lease)
        except DATABASE_ERRORS as exc:
            self.failures += 1
            logger.warning("pgqueue: renewing the leases of %d running handlers failed (%s); a handler whose "
                           "lease cannot be renewed is stopped before its lease ends", len(contexts), exc)
            return
        self.ticks += 1
        held = self._held
        for context, (_, renewed, left) in zip(contexts, rows, strict=True):
            if context not in held:
                # Dropped while the renewal was on its way: a buffered job that was started (its
                # running handler holds the lease now, renewed from the next tick) or a handler that
                # finished. Its job may be acked and gone already; a refusal says nothing about it.
                continue
            if renewed and left is not None:
                # Measured from before the call: the time limit errs on the early side.
                context._lease_renewed(sent + left)
            elif context._lease_lost():
                self.refused += 1
                logger.warning("pgqueue: job %s attempt %d: its lease was lost (it expired and the job was "
                               "reserved again, or the job was cancelled or cleared); its handler is stopped (a "
                               "prefetched job is not started)",
                               context.id, context.attempts, extra=context.log_fields())

