"""``pgqueue demo``: a mixed workload run by a real worker, with a progress bar and the results."""

from __future__ import annotations

import asyncio
import logging
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pgqueue_cli import demo_jobs, render
from pgqueue_cli.runtime import Target, configure_logging

# Generous: the demo needs about three seconds.
DEADLINE_SECONDS = 120.0


class _ConsoleHandler(logging.Handler):
    """Log lines printed through the console, so they appear above the progress bar."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        style = "red" if record.levelno >= logging.ERROR else "yellow" if record.levelno >= logging.WARNING else ""
        self.console.print(self.format(record), style=style, markup=False, soft_wrap=True)


async def run_demo(found: Target) -> bool:
    """Dispatch the demo workload, run it, print status and failures; True if the counts match."""
    console = Console(highlight=False, soft_wrap=True)
    configure_logging(handler=_ConsoleHandler(console))
    workload = demo_jobs.workload()
    connection = found.connection.name
    async with found.client() as client:
        # Start from a clean slate, so a second run shows the same counts.
        repo = await client.failed(connection)
        for name in demo_jobs.QUEUES:
            await client.clear(name, connection=connection)
            await repo.flush(queue=name)

        ready = [job for job, delay in workload if not delay]
        await client.dispatch_many(ready, connection=connection)
        for job, delay in workload:
            if delay:
                await client.dispatch(job, delay=delay, connection=connection)
        console.print(
            f"Dispatched {len(workload)} jobs to queues {', '.join(demo_jobs.QUEUES)}: 40 quick ones, "
            "4 delayed by 1-2.5 s, 3 that fail once and succeed on the retry (backoff 0.5 s), "
            "and 1 that fails twice and ends in pgqueue.failed_jobs.\n"
        )

        worker = await client.worker(connection, queues=demo_jobs.QUEUES, concurrency=8, poll_interval=1.0,
                                    drain_timeout=10.0)
        stats = worker.stats
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        started = time.monotonic()
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("running jobs", total=len(workload))
            running = asyncio.create_task(worker.run())
            # Done when every job has reached an end: acknowledged or in failed_jobs.
            while stats.acked + stats.failed < len(workload) and not running.done():
                if time.monotonic() - started > DEADLINE_SECONDS:
                    break
                progress.update(bar, completed=stats.acked + stats.failed)
                await asyncio.sleep(0.05)
            progress.update(bar, completed=stats.acked + stats.failed)
            worker.stop()
            await running
        elapsed = time.monotonic() - started
        logging.getLogger("pgqueue").handlers.clear()

        console.print("\n$ pgqueue queue:status")
        console.print(await render.status(client, connection), markup=False)
        console.print(f"\n$ pgqueue queue:failed --queue {demo_jobs.DEFAULT}")
        failures = await repo.all(queue=demo_jobs.DEFAULT, limit=10)
        console.print(render.failed_table(failures), markup=False, soft_wrap=True)

    ok = (stats.acked, stats.retried, stats.failed, stats.processed) == (
        demo_jobs.EXPECTED_SUCCEEDED, demo_jobs.EXPECTED_RETRIED, demo_jobs.EXPECTED_FAILED,
        demo_jobs.EXPECTED_ATTEMPTS)
    console.print(
        f"\nDone in {elapsed:.1f}s: {len(workload)} jobs, {stats.processed} attempts, {stats.acked} succeeded, "
        f"{stats.retried} retried after a failure, {stats.failed} failed "
        f"(expected {demo_jobs.EXPECTED_SUCCEEDED} succeeded, {demo_jobs.EXPECTED_RETRIED} retried, "
        f"{demo_jobs.EXPECTED_FAILED} failed): {'OK' if ok else 'UNEXPECTED'}"
    )
    if failures:
        hints = [(f"pgqueue queue:failed {failures[0].id}", "the failure in full, with its traceback"),
                 (f"pgqueue queue:retry all --queue {demo_jobs.DEFAULT}", "put it back on its queue")]
        if found.embedded:
            hints.append(("pgqueue embedded stop", "stop the embedded PostgreSQL (its data stays)"))
        width = max(len(command) for command, _ in hints)
        console.print("\nNext:\n" + "\n".join(f"  {c.ljust(width)}  # {why}" for c, why in hints), markup=False)
    return ok
