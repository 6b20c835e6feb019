"""Issue 28, slot heirs, in the worker: under a queue concurrency limit a worker holds jobs beyond the
free slots, each granted waiting as the heir of one of its running jobs, and starts it in that job's
slot as the job's execution ends, with no write of its own. The limit holds across workers, every job
runs once, and a failure, a snooze, a pause or a stop strands no waiting job."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import psycopg

from pgqueue import Client, JobContext
from tests.worker_jobs import Probe, Retrying
from tests.worker_support import DEADLINE, Runs, client, finish, hooks, rows, runs, scalar, wait_until

__all__ = ["client", "hooks", "runs"]

HELD_WAITING = "select count(*) from pgqueue.jobs where waiting and token is not null and available_at > now()"
RESERVED = "select count(*) from pgqueue.jobs where token is not null"


class Tally:
    """The handlers running now (in-process, across workers), the most seen at once, the runs per job,
    and the most waiting jobs the database showed held while a handler ran."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.lock = asyncio.Lock()
        self.running = 0
        self.max_running = 0
        self.runs: Counter[int] = Counter()
        self.max_waiting = 0

    async def run(self, job: Probe, context: JobContext) -> None:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            async with self.lock:
                cur = await self.conn.execute(HELD_WAITING)
                row = await cur.fetchone()
            assert row is not None
            self.max_waiting = max(self.max_waiting, int(row[0]))
            self.runs[job.n] += 1
        finally:
            self.running -= 1


async def tally(dsn: str, hooks: Any) -> Tally:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    t = Tally(conn)
    hooks("tally", t.run)
    return t


async def drained(dsn: str) -> bool:
    return int(await scalar(dsn, "select count(*) from pgqueue.jobs")) == 0


async def test_a_worker_runs_a_limited_queue_within_its_limit_through_heirs(client: Client, hooks: Any,
                                                                                dsn: str, runs: Runs) -> None:
    await client.set_limits("limited", concurrency=3)
    t = await tally(dsn, hooks)
    for n in range(100):
        await client.dispatch(Probe(hook="tally", n=n), queue="limited")
    worker = await client.worker(queues=["limited"], concurrency=10, heartbeat=False, maintenance_interval=None)
    runs.start(worker)
    await wait_until(lambda: drained(dsn), "the worker to drain the queue", 120)
    await t.conn.close()
    assert t.runs == Counter(range(100))
    assert t.max_running <= 3
    # The worker held jobs beyond the limit's free slots, each started only in its job's slot.
    assert t.max_waiting > 0
    assert await drained(dsn)


async def test_four_workers_in_one_loop_keep_the_limit_together(client: Client, hooks: Any, dsn: str,
                                                                runs: Runs) -> None:
    await client.set_limits("limited", concurrency=3)
    t = await tally(dsn, hooks)
    for n in range(120):
        await client.dispatch(Probe(hook="tally", n=n), queue="limited")
    workers = [await client.worker(queues=["limited"], concurrency=5, heartbeat=False, maintenance_interval=None)
               for _ in range(4)]
    for w in workers:
        runs.start(w)
    await wait_until(lambda: drained(dsn), "the four workers to drain the queue", 120)
    await t.conn.close()
    assert t.runs == Counter(range(120))
    assert t.max_running <= 3
    assert t.max_waiting > 0


async def strands(client: Client, hooks: Any, dsn: str, runs: Runs, how: str) -> None:
    """40 jobs at limit 2, every fifth one failing (retried at once) or snoozing on its first try."""
    await client.set_limits("limited", concurrency=2)
    t = await tally(dsn, hooks)

    once: set[int] = set()  # a snooze uses no try: its attempt number stays 1

    async def moody(job: Probe, context: JobContext) -> None:
        if job.n % 5 == 0 and job.n not in once:
            once.add(job.n)
            if how == "fail":
                raise RuntimeError("the first try of every fifth job fails")
            await context.snooze(0)
            return
        await t.run(job, context)

    hooks("moody", moody)
    for n in range(40):
        await client.dispatch(Retrying(hook="moody", n=n), queue="limited")
    worker = await client.worker(queues=["limited"], concurrency=8, heartbeat=False, maintenance_interval=None)
    runs.start(worker)
    # Well within the waiting jobs' lease (60 s): a job stranded until it expires fails this.
    await wait_until(lambda: drained(dsn), f"every job to end, those that {how}ed first too", 20)
    await t.conn.close()
    assert t.runs == Counter(range(40))
    assert t.max_running <= 2
    assert await rows(dsn, "select * from pgqueue.failed_jobs") == []


async def test_a_failure_while_others_wait_strands_no_waiting_job(client: Client, hooks: Any, dsn: str,
                                                                 runs: Runs) -> None:
    await strands(client, hooks, dsn, runs, "fail")


async def test_a_snooze_while_others_wait_strands_no_waiting_job(client: Client, hooks: Any, dsn: str,
                                                                runs: Runs) -> None:
    await strands(client, hooks, dsn, runs, "snooz")


async def test_a_pause_stops_what_the_worker_does_not_hold_until_the_queue_resumes(client: Client, hooks: Any,
                                                                                  dsn: str, runs: Runs) -> None:
    """A pause stops the reservations at once: the heirs the worker holds still start in their jobs'
    slots (as a paused queue's buffered jobs run; the limit still holds), the rest wait for the resume."""
    await client.set_limits("limited", concurrency=3)
    gate = asyncio.Event()
    started: list[int] = []
    running = 0

    async def hold(job: Probe, context: JobContext) -> None:
        nonlocal running
        started.append(job.n)
        running += 1
        try:
            await gate.wait()
        finally:
            running -= 1

    hooks("hold", hold)
    for n in range(30):
        await client.dispatch(Probe(hook="hold", n=n), queue="limited")
    worker = await client.worker(queues=["limited"], concurrency=10, heartbeat=False, maintenance_interval=None)
    runs.start(worker)
    await wait_until(lambda: len(started) == 3, "the limit's three jobs to start")
    await wait_until(lambda: equals_one_or_more(dsn), "the worker to hold waiting jobs")
    held = {r["n"] for r in await rows(dsn, "select (envelope->'args'->>'n')::int as n from pgqueue.jobs "
                                             "where token is not null")}
    await client.pause("limited")
    for n in range(30, 35):  # not held by the worker: none of these may start while paused
        await client.dispatch(Probe(hook="hold", n=n), queue="limited")
    gate.set()
    await wait_until(lambda: reserved_none(dsn), "the worker to end or give back every job it held")
    await wait_until(lambda: running == 0, "the handlers that started to end")
    assert set(started) <= held, "a job the worker did not hold when the queue was paused started"
    assert int(await scalar(dsn, "select count(*) from pgqueue.jobs")) == 35 - len(started)
    await client.resume("limited")
    await wait_until(lambda: drained(dsn), "the queue to drain after the resume", 60)
    assert sorted(started) == list(range(35))


async def equals_one_or_more(dsn: str) -> bool:
    return int(await scalar(dsn, HELD_WAITING)) > 0


async def reserved_none(dsn: str) -> bool:
    return int(await scalar(dsn, RESERVED)) == 0


async def test_a_stop_hands_the_waiting_jobs_back_unstarted(client: Client, hooks: Any, dsn: str,
                                                            runs: Runs) -> None:
    await client.set_limits("limited", concurrency=3)
    gate = asyncio.Event()
    started: list[int] = []

    async def hold(job: Probe, context: JobContext) -> None:
        started.append(job.n)
        await gate.wait()

    hooks("hold", hold)
    ids = {await client.dispatch(Probe(hook="hold", n=n), queue="limited"): n for n in range(10)}
    worker = await client.worker(queues=["limited"], concurrency=10, heartbeat=False, maintenance_interval=None)
    task = runs.start(worker)
    await wait_until(lambda: len(started) == 3, "the limit's three jobs to start")
    await wait_until(lambda: equals_one_or_more(dsn), "the worker to hold waiting jobs")
    held = await rows(dsn, "select id, attempts from pgqueue.jobs where waiting and token is not null")
    assert all(r["attempts"] == 1 for r in held)
    worker.stop()
    gate.set()
    await finish(task, "the worker to stop", DEADLINE)
    unstarted = [r["id"] for r in held if ids[r["id"]] not in started]
    assert unstarted
    back = await rows(dsn, "select id, attempts, token, waiting from pgqueue.jobs where id = any(%s)", (unstarted,))
    assert sorted((r["id"], r["attempts"], r["token"]) for r in back) == sorted((i, 0, None) for i in unstarted)


async def test_an_heir_starts_in_its_jobs_slot_as_that_job_ends_with_no_write_of_its_own(
        client: Client, hooks: Any, dsn: str, runs: Runs) -> None:
    """Limit 1: the worker's second reservation names the running job, and the next job is granted as
    its heir (held, not started). As the first ends, the heir starts, and its row is the one the
    reservation wrote: no handover, no claim, no other write before it ran."""
    await client.set_limits("limited", concurrency=1)
    release = {1: asyncio.Event(), 2: asyncio.Event()}
    started: list[int] = []

    async def hold(job: Probe, context: JobContext) -> None:
        started.append(job.n)
        await release[job.n].wait()

    hooks("hold", hold)
    first = await client.dispatch(Probe(hook="hold", n=1), queue="limited")
    second = await client.dispatch(Probe(hook="hold", n=2), queue="limited")
    worker = await client.worker(queues=["limited"], concurrency=2, poll_interval=600, heartbeat=False,
                                 maintenance_interval=None)
    task = runs.start(worker)
    heir = "select waiting and heir_of = %s and token is not null from pgqueue.jobs where id = %s"

    async def granted() -> bool:
        return bool(await scalar(dsn, heir, (first, second)))

    await wait_until(granted, "the second job to be granted as the first's heir")
    assert started == [1]
    version = await scalar(dsn, "select xmin::text from pgqueue.jobs where id = %s", (second,))
    release[1].set()
    await wait_until(lambda: started == [1, 2], "the heir to start")
    assert await scalar(dsn, "select xmin::text from pgqueue.jobs where id = %s", (second,)) == version
    release[2].set()
    await wait_until(lambda: drained(dsn), "the heir to end")
    worker.stop()
    await finish(task, "the worker to stop")
