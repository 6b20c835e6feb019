"""Sync handlers (issue 11, item 6): a plain ``def handle`` and ``@job`` on a plain function run
in the worker's thread pool, without blocking the event loop, with a blocking context."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import psycopg

from pgqueue import Client, Job, JobContext, job
from pgqueue.context import SyncJobContext
from tests.worker_jobs import Probe
from tests.worker_support import failures, finish, hooks, jobs, rows, settings_for, wait_event, wait_until

__all__ = ["hooks"]

SHORT_LEASE = {"lease": 4.0, "lease_margin": 1.0, "timeout": 20.0}

#: What the sync handlers below see and do, per test.
STATE: dict[str, Any] = {}


class Blocking(Job):
    """Blocks its thread in ``time.sleep`` until the test sets STATE["release"]."""

    name = "tests.sync:blocking"
    n: int

    def handle(self, context: SyncJobContext) -> None:  # type: ignore[override]  # a sync handler
        STATE["threads"].add(threading.get_ident())
        STATE["started"](self.n)
        while not STATE["release"].is_set():
            time.sleep(0.05)
        STATE["extended"].append(context.extend(30))  # the blocking facade, from the thread


@job(name="tests.sync:fails_itself")
def fails_itself(reason: str, context: SyncJobContext) -> None:
    STATE["loop_thread"] = threading.get_ident()
    context.fail(reason)


@job(name="tests.sync:polls", timeout=0.2, tries=1)
def polls_cancelled(context: SyncJobContext) -> None:
    """Runs until the worker gives up on it (its timeout), then notes that it saw it."""
    while not context.cancelled:
        time.sleep(0.01)
    STATE["saw_cancelled"].set()


async def test_blocking_sync_handlers_delay_neither_async_jobs_nor_the_heartbeat(hooks: Any, dsn: str) -> None:
    loop = asyncio.get_running_loop()
    four_started = asyncio.Event()
    started: set[int] = set()

    def note_start(n: int) -> None:
        started.add(n)
        if len(started) == 4:
            loop.call_soon_threadsafe(four_started.set)

    STATE.update(release=threading.Event(), threads=set(), started=note_start, extended=[])
    woke = asyncio.Event()

    async def wake(job: Probe, context: JobContext) -> None:
        woke.set()

    hooks("wake", wake)
    async with Client(settings=settings_for(dsn, **SHORT_LEASE)) as client:
        ids = await client.dispatch_many([Blocking(n=n) for n in range(4)])
        worker = await client.worker(concurrency=6, threads=4, poll_interval=600, maintenance_interval=None)
        task = asyncio.create_task(worker.run())
        try:
            await wait_event(four_started, "four sync handlers to block in their threads")
            assert threading.get_ident() not in STATE["threads"] and len(STATE["threads"]) == 4
            reserved = {r["id"]: r["available_at"] for r in await jobs(dsn)}

            # An async job dispatched now wakes the worker (NOTIFY) and runs while all four block.
            await client.dispatch(Probe(hook="wake"))
            await wait_event(woke, "the async job to run beside four blocked sync handlers")
            # The heartbeat renews the four blocked handlers' leases meanwhile.
            await wait_until(lambda: _all_renewed(dsn, reserved), "the heartbeat to renew the blocked jobs' leases")
            assert not STATE["release"].is_set()
        finally:
            STATE["release"].set()
        await wait_until(lambda: worker.stats.acked == 5, "the four sync handlers to finish")
        worker.stop()
        assert await finish(task, "the worker to stop") == 5

    assert len(STATE["extended"]) == 4 and all(left > 20 for left in STATE["extended"])
    assert await jobs(dsn) == []
    assert await failures(dsn) == []
    assert len(ids) == 4


async def _all_renewed(dsn: str, reserved: dict[uuid.UUID, Any]) -> bool:
    now = {r["id"]: r["available_at"] for r in await rows(dsn, "select id, available_at from pgqueue.jobs")}
    return all(job_id in now and now[job_id] > at for job_id, at in reserved.items())


async def test_a_sync_function_job_decides_through_the_blocking_context(dsn: str) -> None:
    async with Client(settings=settings_for(dsn)) as client:
        job_id = await fails_itself(reason="no such customer").dispatch(using=client)
        worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
        assert await finish(worker.run(stop_when_empty=True), "the job") == 1

    assert STATE["loop_thread"] != threading.get_ident()
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["reason"], failure["message"]) == (job_id, "failed_by_handler",
                                                                          "no such customer")
    assert worker.stats.failed == 1


async def test_a_sync_handler_past_its_timeout_sees_cancelled(dsn: str) -> None:
    saw = threading.Event()
    STATE["saw_cancelled"] = saw
    async with Client(settings=settings_for(dsn)) as client:
        await polls_cancelled().dispatch(using=client)
        worker = await client.worker(concurrency=1, listen=False, maintenance_interval=None)
        assert await finish(worker.run(stop_when_empty=True), "the job") == 1
    assert await finish(asyncio.to_thread(saw.wait, 30), "the thread to see context.cancelled")
    [failure] = await failures(dsn)
    assert (failure["exception"], failure["reason"], failure["attempts"]) == ("TimeoutError", "exception", 1)
    assert "thread runs on until it returns" in failure["message"]


async def test_a_sync_handlers_context_refuses_to_block_the_event_loop(dsn: str) -> None:
    async with Client(settings=settings_for(dsn)) as client:
        await client.dispatch(Probe(hook="unused"))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cur = await conn.execute("select id, token from pgqueue.reserve(array['default'], 1, 60)")
            [(job_id, token)] = await cur.fetchall()
    context = JobContext(job_id=job_id, token=token, attempts=1, tries=3, queue="default",
                         connection="database", lease_seconds_left=60, decisions=_NoDecisions())
    facade = SyncJobContext(context, asyncio.get_running_loop())
    try:
        facade.extend(10)
    except RuntimeError as exc:
        assert "from the sync handler's thread" in str(exc)
    else:
        raise AssertionError("a blocking call on the event loop's thread was allowed")
    assert (facade.id, facade.attempts, facade.cancelled) == (job_id, 1, False)


class _NoDecisions:
    async def ack(self, job_id: uuid.UUID, token: int) -> bool:
        return True

    async def release(self, job_id: uuid.UUID, token: int, delay: float) -> bool:
        return True

    async def fail(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                   traceback_text: str | None, reason: str) -> bool:
        return True

    async def extend(self, job_id: uuid.UUID, token: int, seconds: float) -> float | None:
        return seconds

    async def snooze(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        return "snoozed"

    async def backpressure(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        return "backpressured"
