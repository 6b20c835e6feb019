"""The worker's scheduling: queue priority, the concurrency limit, waking on NOTIFY, delayed
jobs, and what ``max_jobs`` and ``stop_when_empty`` count and leave behind."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from pgqueue import Client, JobContext, Worker
from tests.worker_jobs import Patient, Probe, Retrying
from tests.worker_support import (
    Runs,
    client,
    failures,
    finish,
    hooks,
    jobs,
    runs,
    scalar,
    settings_for,
    wait_event,
    wait_until,
)

__all__ = ["client", "hooks", "runs"]


async def test_high_queue_drains_before_default(client: Client, hooks: Any) -> None:
    order: list[tuple[str, int]] = []

    async def record(job: Probe, context: JobContext) -> None:
        order.append((context.queue, job.n))

    hooks("order", record)
    for n in range(3):
        await client.dispatch(Probe(hook="order", n=n), queue="default")
    for n in range(10, 13):
        await client.dispatch(Probe(hook="order", n=n), queue="high")
    worker = await client.worker(queues=("high", "default"), concurrency=1, listen=False)

    processed = await finish(worker.run(stop_when_empty=True), "the worker to drain both queues")

    assert processed == 6
    assert order == [("high", 10), ("high", 11), ("high", 12), ("default", 0), ("default", 1), ("default", 2)]


async def test_high_job_arriving_meanwhile_runs_before_the_rest_of_default(client: Client, hooks: Any) -> None:
    order: list[tuple[str, int]] = []

    async def record(job: Probe, context: JobContext) -> None:
        order.append((context.queue, job.n))
        if job.n == 0:
            await client.dispatch(Probe(hook="order", n=100), queue="high")

    hooks("order", record)
    for n in range(3):
        await client.dispatch(Probe(hook="order", n=n), queue="default")
    worker = await client.worker(queues=("high", "default"), concurrency=1, listen=False, prefetch=0)

    assert await finish(worker.run(stop_when_empty=True), "the worker to drain both queues") == 4
    assert order == [("default", 0), ("high", 100), ("default", 1), ("default", 2)]


async def test_high_job_arriving_meanwhile_waits_behind_at_most_the_prefetched_jobs(client: Client,
                                                                                     hooks: Any) -> None:
    order: list[tuple[str, int]] = []

    async def record(job: Probe, context: JobContext) -> None:
        order.append((context.queue, job.n))
        if job.n == 0:
            await client.dispatch(Probe(hook="order", n=100), queue="high")

    hooks("order", record)
    for n in range(5):
        await client.dispatch(Probe(hook="order", n=n), queue="default")
    # Concurrency 1 + prefetch 2: jobs 0, 1 and 2 are reserved at once; the high job dispatched
    # while 0 runs waits behind the two buffered ones, then comes before 3 and 4.
    worker = await client.worker(queues=("high", "default"), concurrency=1, listen=False, prefetch=2)

    assert await finish(worker.run(stop_when_empty=True), "the worker to drain both queues") == 6
    assert order == [("default", 0), ("default", 1), ("default", 2), ("high", 100), ("default", 3),
                     ("default", 4)]


@pytest.mark.parametrize("prefetch", [0, 4])
async def test_no_more_handlers_run_at_once_than_the_concurrency(client: Client, hooks: Any, runs: Runs,
                                                                  dsn: str, prefetch: int) -> None:
    concurrency = 3
    running = peak = 0
    full = asyncio.Event()
    gate = asyncio.Event()

    async def hold(job: Probe, context: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == concurrency:
            full.set()
        try:
            await gate.wait()
            for _ in range(3):  # overlap with the handlers started after the gate opened
                await asyncio.sleep(0)
        finally:
            running -= 1

    hooks("hold", hold)
    await client.dispatch_many([Probe(hook="hold", n=n) for n in range(10)])
    worker = await client.worker(concurrency=concurrency, listen=False, prefetch=prefetch)
    task = runs.start(worker, stop_when_empty=True)

    await wait_event(full, f"{concurrency} handlers to run at once")
    # While all slots are busy, the worker holds exactly `concurrency + prefetch` reservations.
    await wait_until(lambda: len(worker.fetcher.buffer) == prefetch, "the buffer to fill")
    assert await scalar(dsn, "select count(*) from pgqueue.jobs where token is not null") == concurrency + prefetch
    gate.set()

    assert await finish(task, "the worker to drain the queue") == 10
    assert peak == concurrency
    assert await jobs(dsn) == []


async def start_idle_listening(runs: Runs, worker: Worker) -> asyncio.Task[int]:
    """Start ``worker`` and return its task once it LISTENs and has gone idle."""
    task = runs.start(worker)
    assert worker.notifier is not None
    await wait_event(worker.notifier.connected, "the worker's LISTEN connection")
    await wait_event(worker.idle, "the worker to go idle")
    return task


async def test_idle_worker_wakes_on_notify_without_waiting_for_the_poll(client: Client, hooks: Any,
                                                                        runs: Runs) -> None:
    ran = asyncio.Event()

    async def mark(job: Probe, context: JobContext) -> None:
        ran.set()

    hooks("mark", mark)
    worker = await client.worker(concurrency=2, poll_interval=600)
    task = await start_idle_listening(runs, worker)

    await client.dispatch(Probe(hook="mark"))

    await wait_event(ran, "the job to run: an idle worker must wake on NOTIFY (its poll interval is 600 s)")
    worker.stop()
    assert await finish(task, "the worker to stop") == 1


async def test_delayed_job_runs_once_due_and_not_before(client: Client, hooks: Any, dsn: str) -> None:
    seen: dict[str, Any] = {}

    async def stamp(job: Probe, context: JobContext) -> None:
        seen["reserved_at"] = await scalar(dsn, "select reserved_at from pgqueue.jobs where id = %s", (context.id,))
        seen["clock"] = await scalar(dsn, "select clock_timestamp()")

    hooks("stamp", stamp)
    job_id = await client.dispatch(Probe(hook="stamp"), delay=0.5)
    due = await scalar(dsn, "select available_at from pgqueue.jobs where id = %s", (job_id,))
    # No NOTIFY for a delayed job and a 10-minute poll: only sleeping until it is due can run it.
    worker = await client.worker(concurrency=1, listen=False, poll_interval=600)

    assert await finish(worker.run(max_jobs=1), "the delayed job to run once due") == 1

    assert seen["reserved_at"] >= due, "the job was reserved before it was due (database clock)"
    assert seen["clock"] >= due
    assert await jobs(dsn) == []


async def test_delayed_job_enqueued_to_an_idle_worker_runs_once_due(client: Client, hooks: Any, runs: Runs,
                                                                     dsn: str) -> None:
    seen: dict[str, Any] = {}
    ran = asyncio.Event()

    async def stamp(job: Probe, context: JobContext) -> None:
        seen["reserved_at"] = await scalar(dsn, "select reserved_at from pgqueue.jobs where id = %s", (context.id,))
        ran.set()

    hooks("stamp", stamp)
    worker = await client.worker(concurrency=1, poll_interval=600)
    task = await start_idle_listening(runs, worker)

    job_id = await client.dispatch(Probe(hook="stamp"), delay=0.3)
    due = await scalar(dsn, "select available_at from pgqueue.jobs where id = %s", (job_id,))

    await wait_event(ran, "the delayed job to run once due (the worker was idle with a 600 s poll)")
    assert seen["reserved_at"] >= due, "the job was reserved before it was due (database clock)"
    worker.stop()
    assert await finish(task, "the worker to stop") == 1


async def test_max_jobs_counts_failed_attempts_and_retries(client: Client, hooks: Any, dsn: str) -> None:
    async def boom(job: Probe, context: JobContext) -> None:
        raise RuntimeError(f"attempt {context.attempts}")

    hooks("boom", boom)
    job_id = await client.dispatch(Retrying(hook="boom"))

    first = await client.worker(concurrency=1, listen=False)
    assert await finish(first.run(max_jobs=2), "two reservations") == 2
    assert first.stats.retried == 2
    [row] = await jobs(dsn)
    assert (row["id"], row["attempts"], row["token"]) == (job_id, 2, None)

    second = await client.worker(concurrency=1, listen=False)
    assert await finish(second.run(max_jobs=5, stop_when_empty=True), "the last attempt") == 1
    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert (failure["job_id"], failure["attempts"], failure["reason"]) == (job_id, 3, "exception")


async def test_max_jobs_leaves_the_rest_untouched(client: Client, hooks: Any, dsn: str) -> None:
    ran: list[int] = []

    async def record(job: Probe, context: JobContext) -> None:
        ran.append(job.n)

    hooks("record", record)
    await client.dispatch_many([Probe(hook="record", n=n) for n in range(5)])
    worker = await client.worker(concurrency=4, listen=False)

    assert await finish(worker.run(max_jobs=3), "three jobs") == 3

    assert len(ran) == 3
    left = await jobs(dsn)
    assert len(left) == 2
    assert all(r["attempts"] == 0 and r["token"] is None for r in left)


async def test_stop_when_empty_returns_with_delayed_jobs_remaining(client: Client, hooks: Any, dsn: str) -> None:
    ran: list[int] = []

    async def record(job: Probe, context: JobContext) -> None:
        ran.append(job.n)

    hooks("record", record)
    await client.dispatch_many([Probe(hook="record", n=n) for n in range(2)])
    delayed_id = await client.dispatch(Probe(hook="record", n=99), delay=3600)
    worker = await client.worker(concurrency=2, listen=False, poll_interval=600)

    assert await finish(worker.run(stop_when_empty=True), "the ready jobs") == 2

    assert sorted(ran) == [0, 1]
    [row] = await jobs(dsn)
    assert (row["id"], row["attempts"], row["token"]) == (delayed_id, 0, None)
    assert row["due_in"] > 3000


async def test_stop_when_empty_waits_for_immediate_retries(client: Client, hooks: Any, dsn: str) -> None:
    attempts: list[int] = []

    async def fail_twice(job: Probe, context: JobContext) -> None:
        attempts.append(context.attempts)
        if context.attempts < 3:
            raise RuntimeError("not yet")

    hooks("twice", fail_twice)
    await client.dispatch(Retrying(hook="twice"))
    worker = await client.worker(concurrency=2, listen=False)

    assert await finish(worker.run(stop_when_empty=True), "the job and its retries") == 3
    assert attempts == [1, 2, 3]
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


async def test_stop_when_empty_does_not_wait_for_a_delayed_retry(client: Client, hooks: Any, dsn: str) -> None:
    async def boom(job: Probe, context: JobContext) -> None:
        raise RuntimeError("later")

    hooks("boom", boom)
    job_id = await client.dispatch(Patient(hook="boom"))
    worker = await client.worker(concurrency=1, listen=False, poll_interval=600)

    assert await finish(worker.run(stop_when_empty=True), "the first attempt") == 1
    [row] = await jobs(dsn)
    assert (row["id"], row["attempts"], row["token"]) == (job_id, 1, None)
    assert row["due_in"] > 30  # Patient's backoff is 60 s


async def test_a_worker_listens_on_its_own_connections_database(dsn: str, empty_dsn: str, hooks: Any,
                                                                runs: Runs) -> None:
    # The default connection points at another database: a worker of connection "other" must
    # LISTEN where its jobs are enqueued, or a NOTIFY never reaches it.
    settings = settings_for(empty_dsn)
    other = replace(settings.connections["database"], name="other", dsn=dsn)
    settings = replace(settings, connections={**settings.connections, "other": other})
    ran = asyncio.Event()

    async def mark(job: Probe, context: JobContext) -> None:
        ran.set()

    hooks("mark", mark)
    async with Client(settings=settings) as client:
        worker = await client.worker("other", concurrency=1, poll_interval=600, maintenance_interval=None)
        task = await start_idle_listening(runs, worker)

        await client.dispatch(Probe(hook="mark"), connection="other")

        await wait_event(ran, "the job to run: the worker must LISTEN on connection 'other''s database")
        worker.stop()
        assert await finish(task, "the worker to stop") == 1
