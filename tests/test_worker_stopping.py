"""Stopping a worker: ``stop()`` and cancelling ``run()`` let running handlers finish, reserve
nothing new, and hand back jobs reserved but not started."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pgqueue import Client, JobContext, Worker
from pgqueue.store import Store
from pgqueue.worker.completer import Completer
from tests.worker_jobs import Probe
from tests.worker_support import Runs, client, finish, hooks, jobs, runs, settings_for, wait_event

__all__ = ["client", "hooks", "runs"]


class Held:
    """A hook that blocks every handler on a gate and notes who started and who finished."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.started: list[int] = []
        self.finished: list[int] = []
        self.all_started = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, job: Probe, context: JobContext) -> None:
        self.started.append(job.n)
        if len(self.started) == self.expected:
            self.all_started.set()
        await self.gate.wait()
        self.finished.append(job.n)


async def _start_held(client: Client, hooks: Any, runs: Runs) -> tuple[Worker, asyncio.Task[int], Held]:
    held = Held(expected=2)
    hooks("held", held)
    await client.dispatch_many([Probe(hook="held", n=n) for n in range(5)])
    worker = await client.worker(concurrency=2, listen=False)
    task = runs.start(worker)
    await wait_event(held.all_started, "two handlers to start")
    return worker, task, held


async def _assert_drained(dsn: str, held: Held) -> None:
    assert sorted(held.finished) == sorted(held.started), "a running handler did not finish"
    assert len(held.started) == 2, "a job was started after the stop"
    left = await jobs(dsn)
    assert len(left) == 3
    assert all(r["attempts"] == 0 and r["token"] is None for r in left), "a job was reserved after the stop"
    assert not {r["envelope"]["args"]["n"] for r in left} & set(held.started), "a finished job was not acknowledged"


async def test_stop_lets_running_handlers_finish_and_reserves_nothing_new(client: Client, hooks: Any, runs: Runs,
                                                                         dsn: str) -> None:
    worker, task, held = await _start_held(client, hooks, runs)

    worker.stop()
    held.gate.set()

    assert await finish(task, "run() to return after stop()") == 2
    await _assert_drained(dsn, held)


async def test_cancelling_run_drains_the_same_way(client: Client, hooks: Any, runs: Runs, dsn: str) -> None:
    _, task, held = await _start_held(client, hooks, runs)

    task.cancel()
    held.gate.set()

    with pytest.raises(asyncio.CancelledError):
        await finish(task, "the cancelled run() to finish draining")
    await _assert_drained(dsn, held)


async def test_stop_hands_back_jobs_reserved_but_not_started(client: Client, hooks: Any, dsn: str) -> None:
    ran: list[int] = []
    worker: Worker | None = None

    async def stop_first(job: Probe, context: JobContext) -> None:
        ran.append(job.n)
        assert worker is not None
        worker.stop()  # before any await: the batch's other jobs have not started yet

    hooks("stop_first", stop_first)
    await client.dispatch_many([Probe(hook="stop_first", n=n) for n in range(3)])
    worker = await client.worker(concurrency=3, listen=False)

    await finish(worker.run(), "run() to return after stop()")

    assert len(ran) == 1
    left = await jobs(dsn)
    assert len(left) == 2
    # Handed back ready, with their attempt given back.
    assert all(r["token"] is None and r["attempts"] == 0 and r["due_in"] <= 0 for r in left)


async def test_stop_with_cancel_running_releases_the_running_jobs(client: Client, hooks: Any, runs: Runs,
                                                                  dsn: str) -> None:
    worker, task, held = await _start_held(client, hooks, runs)

    worker.stop(cancel_running=True)

    assert await finish(task, "run() to return after a forced stop") == 2
    assert held.finished == []
    left = await jobs(dsn)
    assert len(left) == 5
    assert all(r["token"] is None and r["due_in"] <= 0 for r in left)  # released, ready for another worker


async def test_a_client_closed_under_a_running_worker_gives_up_its_pending_acks(
        dsn: str, hooks: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Closing the client first is a caller's mistake, but it must not leave a completer retrying
    forever on a closed pool (it hung the event loop's teardown): the unsent acks are given up,
    said in the log, and those jobs run again after their leases expire."""

    async with Client(settings=settings_for(dsn)) as owner:
        await owner.dispatch(Probe(hook="unused"))
        store = Store(await owner.pool())
        [reserved], _ = await store.reserve(["default"], 1, 60.0)
    completer = Completer(store, flush_interval=0.01)
    flushing = asyncio.create_task(completer.run())
    completer.add(reserved.id, reserved.token)
    with caplog.at_level("ERROR", logger="pgqueue.worker"):
        await finish(completer.wait_idle(), "the completer to give up on a closed pool")
    flushing.cancel()
    await asyncio.gather(flushing, return_exceptions=True)
    assert completer.pending == 0 and completer.acked == 0
    assert "connection pool was closed" in caplog.text
    [row] = await jobs(dsn)
    assert row["token"] == reserved.token  # still reserved: it runs again after its lease
