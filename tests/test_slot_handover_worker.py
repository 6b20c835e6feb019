"""Issue 28, slot handover, in the worker: under a queue concurrency limit a worker holds jobs beyond
the free slots (granted waiting) and starts one in the slot of each job of its own that ends with an
ack. The limit holds across workers, every job runs once, and a failure, a snooze, a pause or a stop
strands no waiting job."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import psycopg
import pytest

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


async def test_a_worker_runs_a_limited_queue_within_its_limit_through_handovers(client: Client, hooks: Any,
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
    # The worker held jobs beyond the limit's free slots, started only in slots handed over.
    assert t.max_waiting > 0
    assert await drained(dsn)


@pytest.mark.xfail(strict=False, reason=(
    "intermittent (about 1 run in 4 with four runs of this file at once): 4 handlers ran at once at limit 3. "
    "Claims by several workers race (see test_slot_handover.py::test_a_claim_and_a_rival_never_take_the_same_slot), "
    "and a job started in a slot whose handover is then refused keeps running uncounted"))
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

    async def moody(job: Probe, context: JobContext) -> None:
        if job.n % 5 == 0 and context.attempts == 1:
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


@pytest.mark.xfail(strict=False, reason=(
    "intermittent (about 1 run in 4): after a failed attempt retried at once (pgqueue.fail/release, not an ack), "
    "waiting jobs of the queue are sometimes stranded, leased and unstarted, until their lease expires; not "
    "strict because the same run passes when the retry's reservation happens to hand them slots again"))
async def test_a_failure_while_others_wait_strands_no_waiting_job(client: Client, hooks: Any, dsn: str,
                                                                 runs: Runs) -> None:
    await strands(client, hooks, dsn, runs, "fail")


@pytest.mark.xfail(strict=True, reason=(
    "a job that snoozes (pgqueue.snooze, not an ack) leaves the worker's waiting jobs of its queue stranded: no "
    "handover rides with it and no claim is made for them, so they wait, leased and unstarted, until their lease "
    "expires (60 s), and the snoozed job, ready again, is not reserved meanwhile"))
async def test_a_snooze_while_others_wait_strands_no_waiting_job(client: Client, hooks: Any, dsn: str,
                                                                runs: Runs) -> None:
    await strands(client, hooks, dsn, runs, "snooz")


@pytest.mark.xfail(strict=True, reason=(
    "a job started in a slot whose handover is still unconfirmed (its ack batch in flight) hands that slot on "
    "when it ends, so after a pause the worker runs every waiting job it holds (27 here, not at most one per "
    "slot) before the first refusal comes back; the same chain outruns a lowered limit"))
async def test_a_pause_stops_the_handovers_until_the_queue_resumes(client: Client, hooks: Any, dsn: str,
                                                                   runs: Runs) -> None:
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
    await client.pause("limited")
    gate.set()
    # The three end; each may hand its slot to one waiting job (refused: paused), and then nothing
    # starts and the worker gives its waiting jobs back.
    await wait_until(lambda: reserved_none(dsn), "the worker to give back every job it held")
    await wait_until(lambda: running == 0, "the handlers that started to end")
    after_pause = len(started) - 3
    assert after_pause <= 3
    left = int(await scalar(dsn, "select count(*) from pgqueue.jobs"))
    assert left == 30 - len(started)
    assert left > 0
    await client.resume("limited")
    await wait_until(lambda: drained(dsn), "the queue to drain after the resume", 60)
    assert sorted(started) == list(range(30))


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
