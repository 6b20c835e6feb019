"""Jobs for the observability tests (tests/test_observability.py): workers import them with
``--app tests.observability_jobs``. Their outcomes are fixed, so metrics can be counted exactly."""

from __future__ import annotations

from pgqueue import Job, JobContext


class Ok(Job):
    """Succeeds at once."""

    name = "obs:ok"
    queue = "obs"

    async def handle(self, context: JobContext) -> None:
        return None


class FlakyOnce(Job):
    """Fails its first attempt, succeeds on the second (retried at once)."""

    name = "obs:flaky"
    queue = "obs"
    tries = 3
    backoff = 0.0

    async def handle(self, context: JobContext) -> None:
        if context.attempts == 1:
            raise RuntimeError("first attempt fails")


class Broken(Job):
    """Always fails: two tries, then it is recorded in failed_jobs (reason 'exception')."""

    name = "obs:broken"
    queue = "obs"
    tries = 2
    backoff = 0.0

    async def handle(self, context: JobContext) -> None:
        raise ValueError("broken for good")


#: The password :class:`Secretive` jobs carry; no log line may show it.
SECRET = "hunter2-very-secret"


class Secretive(Job):
    """Raises an exception that quotes its secret arg: two tries, then failed_jobs."""

    name = "obs:secretive"
    queue = "obs_secret"
    tries = 2
    backoff = 0.0
    redact = ("password",)

    password: str
    pin: int = 0

    async def handle(self, context: JobContext) -> None:
        raise PermissionError(f"login refused for password {self.password!r}")
