"""Jobs for the ``--processes`` tests: the supervised workers import them with ``--app tests.supervisor_jobs``.

They talk to the test through files in ``PGQUEUE_TEST_MARKS`` (a folder the test creates):
a job leaves a mark named after what it saw, so the test can wait for it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pgqueue import Job, JobContext


def _marks() -> Path:
    return Path(os.environ["PGQUEUE_TEST_MARKS"])


# A worker process whose slot is listed here exits at start-up, as a broken deployment would.
if os.environ.get("PGQUEUE_WORKER_PROCESS") and os.environ.get("PGQUEUE_TEST_BROKEN_START"):
    raise RuntimeError("this worker process cannot start (simulated broken deployment)")


class Noop(Job):
    """Succeeds at once."""

    name = "proc:noop"
    queue = "proc"

    async def handle(self, context: JobContext) -> None:
        return None


class Rendezvous(Job):
    """Finishes only once ``parties`` of these run at the same time in different processes."""

    name = "proc:rendezvous"
    queue = "proc"
    timeout = 20

    parties: int = 2

    async def handle(self, context: JobContext) -> None:
        (_marks() / f"rendezvous-{os.getpid()}").touch()
        # The other party is another process: its mark on disk is the only signal there is.
        while len({p.name for p in _marks().glob("rendezvous-*")}) < self.parties:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


class HoldFirstAttempt(Job):
    """Its first attempt marks its process and never returns (the test kills that process); later ones succeed."""

    name = "proc:hold"
    queue = "proc"
    timeout = 1.0

    async def handle(self, context: JobContext) -> None:
        if context.attempts == 1:
            (_marks() / f"holding-{os.getpid()}").touch()
            await asyncio.Event().wait()
