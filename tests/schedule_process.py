"""A worker process with a periodic job, for the schedule tests: ``python -m tests.schedule_process --dsn ...``.

The job ``tests.schedule.every_second`` ticks every second onto the queue ``ticks``, which this
worker does not serve, so every enqueued tick stays in ``pgqueue.jobs`` for the test to count.
Prints ``scheduler running`` once its worker has started.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta

from pgqueue import Client, Job, JobContext
from tests.worker_support import settings_for


class EverySecond(Job):
    """Enqueued once per second by whichever worker gets there first."""

    name = "tests.schedule.every_second"
    queue = "ticks"
    schedule = timedelta(seconds=1)
    # A worker delayed past a tick on this shared 2-core machine still enqueues it.
    schedule_catch_up = 5
    schedule_args = {"label": "tick"}

    label: str

    async def handle(self, context: JobContext) -> None:
        return None


async def main(dsn: str) -> int:
    async with Client(settings=settings_for(dsn)) as client:
        worker = await client.worker(queues=["default"], concurrency=1, listen=False, poll_interval=5.0)
        worker.install_signal_handlers()
        print("scheduler running", flush=True)
        await worker.run()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tests.schedule_process")
    parser.add_argument("--dsn", required=True)
    sys.exit(asyncio.run(main(parser.parse_args().dsn)))
