"""Jobs for the CLI tests: a worker subprocess imports them with ``--app tests.cli_jobs``."""

from __future__ import annotations

from pgqueue import Job, JobContext


class Quick(Job):
    """Succeeds at once."""

    name = "cli:quick"
    queue = "cli"

    n: int = 0

    async def handle(self, context: JobContext) -> None:
        return None


class FailsOnce(Job):
    """Fails on its first attempt, succeeds on the retry."""

    name = "cli:fails_once"
    queue = "cli"
    tries = 2
    backoff = 0.0

    async def handle(self, context: JobContext) -> None:
        if context.attempts == 1:
            raise ConnectionError("first attempt fails on purpose")


class Broken(Job):
    """Always fails; one try, so it goes straight to failed_jobs."""

    name = "cli:broken"
    queue = "cli"
    tries = 1

    reason: str = "broken on purpose"

    async def handle(self, context: JobContext) -> None:
        raise RuntimeError(self.reason)
