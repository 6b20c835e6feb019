"""Issue 28, slot heirs, across worker processes: four workers of concurrency 5 on a queue limited to 3
never run more than 3 handlers at once, while they hold jobs beyond the limit (each waiting as the heir
of one of its worker's running jobs), and every job runs once.

The handlers write their start and end to ``test_ledger`` on the database clock, so the concurrency is
read from what the handlers did, not from what the database granted."""

from __future__ import annotations

import sys
from typing import Any

from pgqueue import Client
from tests.worker_jobs import LedgerJob
from tests.worker_support import client, create_ledger, rows, scalar, spawn, wait_until

__all__ = ["client", "spawn"]  # fixtures

Spawn = Any
JOBS = 120
LIMIT = 3


def _most_at_once(ledger: list[dict[str, Any]]) -> int:
    """The most handlers running at one time, from their start and end rows."""
    events = sorted((r["at"], 1 if r["event"] == "started" else -1) for r in ledger)
    # An end at the same instant as a start is counted first: the slot was free again.
    events.sort(key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


async def test_four_worker_processes_under_a_limit_of_three_hand_slots_over_and_never_run_four(
        client: Client, spawn: Spawn, dsn: str) -> None:
    await create_ledger(dsn)
    await client.set_limits(concurrency=LIMIT)
    await client.dispatch_many([LedgerJob(dsn=dsn, n=n) for n in range(JOBS)])
    workers = [await spawn(sys.executable, "-m", "tests.worker_process", "--dsn", dsn, "--concurrency", "5",
                           "--poll-interval", "0.2") for _ in range(4)]
    waiting_seen: list[int] = []

    async def done() -> bool:
        # While they drain, note how many jobs are held beyond the limit (leased, waiting for a slot).
        waiting_seen.append(int(await scalar(
            dsn, "select count(*) from pgqueue.jobs where waiting and token is not null and available_at > now()")))
        return int(await scalar(dsn, "select count(*) from test_ledger where event = 'finished'")) >= JOBS

    await wait_until(done, f"the {JOBS} jobs to finish", within=120)
    for worker in workers:
        await worker.kill()

    ledger = await rows(dsn, "select n, event, at from test_ledger order by at")
    finished = sorted(r["n"] for r in ledger if r["event"] == "finished")
    assert finished == list(range(JOBS)), "a job was lost or ran twice"
    assert _most_at_once(ledger) <= LIMIT
    assert max(waiting_seen) > 0, "no job was ever held waiting for a slot: no heir was granted"
    # Nothing is left behind: no job held waiting, none handed back and forgotten.
    assert int(await scalar(dsn, "select count(*) from pgqueue.jobs")) == 0
