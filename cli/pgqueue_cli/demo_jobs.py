"""The jobs of ``pgqueue demo``: quick ones, delayed ones, one that fails once, one that always fails.

They are ordinary pgqueue jobs; a worker runs them after importing this module::

    pgqueue queue:work --queue demo-high,demo --app pgqueue_cli.demo_jobs
    pgqueue queue:dispatch demo:send_email --args '{"to": "ada@example.com"}' --app pgqueue_cli.demo_jobs
"""

from __future__ import annotations

import asyncio
import random

from pgqueue import Backoff, Job, JobContext

HIGH = "demo-high"
DEFAULT = "demo"
QUEUES = (HIGH, DEFAULT)


class ResizeImage(Job):
    """A quick job on the high-priority queue."""

    name = "demo:resize_image"
    queue = HIGH

    image_id: int

    async def handle(self, context: JobContext) -> None:
        await asyncio.sleep(random.uniform(0.005, 0.03))  # stands in for real work


class SendEmail(Job):
    """A quick job on the default queue."""

    name = "demo:send_email"
    queue = DEFAULT

    to: str

    async def handle(self, context: JobContext) -> None:
        await asyncio.sleep(random.uniform(0.005, 0.03))


class SendReminder(Job):
    """Dispatched with a delay: invisible to workers until it is due."""

    name = "demo:send_reminder"
    queue = DEFAULT

    user_id: int

    async def handle(self, context: JobContext) -> None:
        await asyncio.sleep(0.005)


class SyncInventory(Job):
    """Fails on its first attempt (a simulated network blip) and succeeds on the retry."""

    name = "demo:sync_inventory"
    queue = DEFAULT
    tries = 3
    backoff = (0.5, 1.0)  # first retry after 0.5 s, later ones after 1 s

    warehouse: str

    async def handle(self, context: JobContext) -> None:
        if context.attempts == 1:
            raise ConnectionError(f"warehouse {self.warehouse!r} did not answer (simulated)")


class ChargeCard(Job):
    """Fails on every attempt; after its last try it lands in ``pgqueue.failed_jobs``."""

    name = "demo:charge_card"
    queue = DEFAULT
    tries = 2
    backoff = Backoff.fixed(0.5)

    order_id: int
    amount_cents: int

    async def handle(self, context: JobContext) -> None:
        raise ValueError(f"card declined for order {self.order_id} (simulated)")


def workload() -> list[tuple[Job, float]]:
    """The demo's jobs with their delays (seconds)."""
    jobs: list[tuple[Job, float]] = []
    jobs += [(ResizeImage(image_id=i), 0.0) for i in range(1, 25)]
    jobs += [(SendEmail(to=f"user{i}@example.com"), 0.0) for i in range(1, 17)]
    jobs += [(SendReminder(user_id=i), 0.5 + 0.5 * i) for i in range(1, 5)]
    jobs += [(SyncInventory(warehouse=w), 0.0) for w in ("north", "south", "east")]
    jobs += [(ChargeCard(order_id=1042, amount_cents=4999), 0.0)]
    return jobs


# What the demo must end with: every attempt counted by the worker.
EXPECTED_JOBS = 48
EXPECTED_SUCCEEDED = 47  # 24 + 16 + 4 + 3
EXPECTED_RETRIED = 4  # each SyncInventory once, ChargeCard once
EXPECTED_FAILED = 1  # ChargeCard, after 2 attempts
EXPECTED_ATTEMPTS = EXPECTED_SUCCEEDED + EXPECTED_RETRIED + EXPECTED_FAILED
