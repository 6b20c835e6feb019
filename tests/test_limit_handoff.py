"""Issue 28, no collapse under limits: a worker whose reservation came back short (a queue or a
partition at its concurrency limit) reserves again as soon as one of its own executions ends, the
ended job's ack riding with that reservation, instead of waiting for ``next_due``'s re-look at a
queue at its limit (50 ms; a queue limit of 40 drained at a twentieth of the unlimited rate). Under a
queue limit (revision 0014) the worker does better still: it reserves the next job at once as an heir in
the slot it holds (waiting), which starts as the first ends with no reservation in between."""

from __future__ import annotations

import asyncio
from typing import Any

from pgqueue import Client, JobContext
from tests.worker_jobs import Probe
from tests.worker_support import client, finish, hooks, scalar, wait_until

__all__ = ["client", "hooks"]

SAME_TRANSACTION = ("select (select xmin::text from pgqueue.completed_jobs where job_id = %s)"
                    " = (select xmin::text from pgqueue.jobs where id = %s)")


async def handoff(client: Client, hooks: Any, dsn: str, queue: str, partition: str | None) -> tuple[bool, bool]:
    """Two jobs, the second held back by a limit of 1 while the first runs: whether the reservation
    that granted the second is the transaction that acked the first, and whether it was granted
    before, as an heir in the first's slot."""
    release = {1: asyncio.Event(), 2: asyncio.Event()}
    started: list[int] = []

    async def hold(job: Probe, context: JobContext) -> None:
        started.append(job.n)
        await release[job.n].wait()

    hooks("hold", hold)
    first = await client.dispatch(Probe(hook="hold", n=1), queue=queue, partition=partition)
    second = await client.dispatch(Probe(hook="hold", n=2), queue=queue, partition=partition)
    # The completer would send the first's ack alone 10 ms after it ends: sooner than a re-look.
    worker = await client.worker(queues=[queue], concurrency=2, prefetch=0, poll_interval=600, heartbeat=False,
                                 maintenance_interval=None, keep_completed=3600, ack_flush_interval=0.01)
    task = asyncio.create_task(worker.run())
    try:
        await wait_until(lambda: started == [1], "the first job to start")
        # Held back: not reserved, or (a queue limit, issue 28) reserved waiting for the slot of the first.
        assert await scalar(dsn, "select token is null or waiting from pgqueue.jobs where id = %s", (second,))
        heir = bool(await scalar(dsn, "select coalesce(heir_of = %s, false) from pgqueue.jobs where id = %s",
                                 (first, second)))
        release[1].set()
        await wait_until(lambda: started == [1, 2], "the second job to start")
        same = bool(await scalar(dsn, SAME_TRANSACTION, (first, second)))
        release[2].set()
    finally:
        worker.stop()
        await finish(task, "the worker to stop")
    return same, heir


async def test_at_a_queue_limit_the_slot_goes_on_with_the_ack_of_the_job_that_ended(client: Client, hooks: Any,
                                                                                    dsn: str) -> None:
    await client.set_limits("limited", concurrency=1)
    same, heir = await handoff(client, hooks, dsn, "limited", None)
    # Granted as an heir in the first's slot before it ended (or, had the worker been slower to name
    # its slot than the first to end, in the transaction of its ack).
    assert heir or same


async def test_at_a_partition_limit_the_slot_goes_on_with_the_ack_of_the_job_that_ended(client: Client,
                                                                                        hooks: Any, dsn: str) -> None:
    await client.set_limits("tenants", per_partition_concurrency=1)
    same, heir = await handoff(client, hooks, dsn, "tenants", "tenant:1")
    assert same and not heir  # no heirs in a partitioned queue
