"""Prefetch (issue 18): a worker reserves beyond its free slots into a leased local buffer.

Covered: the bound (``concurrency + prefetch`` reservations per worker) and how two workers
share a small backlog; stop hands the buffer back unstarted; kill -9 with a full buffer loses
nothing; a cancelled buffered job never runs (notification, or the heartbeat's refused
renewal); a buffered job whose lease is about to end is handed back, not run; a bad setting
is refused by name.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import psycopg
import pytest

from pgqueue import Client, JobContext, QueueConfigurationError
from pgqueue.store import Store
from pgqueue.worker.completer import Completer
from tests.worker_jobs import LedgerJob, LedgerOnce, Probe
from tests.worker_support import (
    Runs,
    client,
    create_ledger,
    equals,
    failures,
    finish,
    hooks,
    jobs,
    lock_waits,
    rows,
    runs,
    scalar,
    settings_for,
    spawn,
    wait_event,
    wait_until,
)

__all__ = ["client", "hooks", "runs", "spawn"]  # fixtures

pytestmark = pytest.mark.asyncio

LOCK = 918_018

Spawn = Any


class Gate:
    """A hook: records each job's ``n`` and attempt; the job ``n == 0`` waits for :attr:`open`."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.first_started = asyncio.Event()
        self.ran: list[tuple[int, int]] = []

    async def __call__(self, job: Probe, context: JobContext) -> None:
        self.ran.append((job.n, context.attempts))
        if job.n == 0:
            await context.extend(60)  # keeps its own lease while the test looks at the buffer
            self.first_started.set()
            await self.open.wait()


async def _reserved(dsn: str) -> int:
    return int(await scalar(dsn, "select count(*) from pgqueue.jobs where token is not null"))


async def _hold_lock(dsn: str) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await conn.execute("select pg_advisory_lock(%s)", (LOCK,))
    return conn


async def _ledger(dsn: str, event: str) -> list[dict[str, Any]]:
    return await rows(dsn, "select n, attempt, token, pid from test_ledger where event = %s order by at", (event,))


async def test_prefetch_is_checked_by_name(client: Client) -> None:
    bad: Any
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(QueueConfigurationError, match="prefetch must be an integer >= 0"):
            await client.worker(prefetch=bad)
    worker = await client.worker(concurrency=4)
    assert worker.prefetch == 50  # the default: min(500, max(50, 10 * concurrency))
    assert (await client.worker(concurrency=20)).prefetch == 200


async def test_stop_hands_back_the_buffer_unstarted(client: Client, hooks: Any, runs: Runs, dsn: str) -> None:
    gate = Gate()
    hooks("gate", gate)
    await client.dispatch_many([Probe(hook="gate", n=n) for n in range(8)])
    worker = await client.worker(concurrency=1, prefetch=5, listen=False)
    task = runs.start(worker)
    await wait_event(gate.first_started, "the first handler to start")
    await wait_until(lambda: worker.fetcher.buffer, "the buffer to fill")
    assert await _reserved(dsn) == 6, "a worker holds at most concurrency + prefetch reservations"

    worker.stop()
    gate.open.set()
    await finish(task, "the worker to stop")

    assert gate.ran == [(0, 1)], "a buffered job was started after the stop"
    left = await jobs(dsn)
    assert len(left) == 7
    handed_back = [r for r in left if r["envelope"]["args"]["n"] in range(1, 6)]
    assert len(handed_back) == 5
    assert all(r["token"] is None and r["attempts"] == 0 and r["due_in"] <= 0 for r in handed_back), \
        "a buffered job was not handed back ready, with its attempt given back"


async def test_cancelled_buffered_job_never_runs(client: Client, hooks: Any, runs: Runs, dsn: str) -> None:
    gate = Gate()
    hooks("gate", gate)
    ids = await client.dispatch_many([Probe(hook="gate", n=n) for n in range(4)])
    worker = await client.worker(concurrency=1, prefetch=3)
    task = runs.start(worker, stop_when_empty=True)
    await wait_event(gate.first_started, "the first handler to start")
    await wait_until(lambda: len(worker.fetcher.buffer) == 3, "the buffer to fill")
    assert worker.notifier is not None
    await wait_event(worker.notifier.connected, "the worker to LISTEN")

    assert await client.cancel(ids[2]) == "cancelled_running"
    await wait_until(lambda: any(item.finished for item in worker.fetcher.buffer),
                     "the cancellation to reach the buffer")
    gate.open.set()
    await finish(task, "the worker to drain")

    assert sorted(n for n, _ in gate.ran) == [0, 1, 3], "a cancelled buffered job ran"
    assert [f["reason"] for f in await failures(dsn)] == ["cancelled"]
    assert await jobs(dsn) == []


async def test_cancelled_buffered_job_is_dropped_by_the_heartbeat_without_notification(
        client: Client, hooks: Any, runs: Runs, dsn: str) -> None:
    gate = Gate()
    hooks("gate", gate)
    ids = await client.dispatch_many([Probe(hook="gate", n=n) for n in range(3)])
    worker = await client.worker(concurrency=1, prefetch=2, listen=False)  # no pgqueue_cancel notification
    task = runs.start(worker, stop_when_empty=True)
    await wait_event(gate.first_started, "the first handler to start")
    await wait_until(lambda: len(worker.fetcher.buffer) == 2, "the buffer to fill")

    assert await client.cancel(ids[1]) == "cancelled_running"
    assert worker.heartbeat is not None
    await worker.heartbeat.tick()  # the renewal of the cancelled job is refused by the fence
    assert [item.finished for item in worker.fetcher.buffer] == [True, False]
    gate.open.set()
    await finish(task, "the worker to drain")

    assert sorted(n for n, _ in gate.ran) == [0, 2], "a cancelled buffered job ran"
    assert await jobs(dsn) == []


async def test_buffered_job_whose_lease_is_about_to_end_is_handed_back_not_run(
        dsn: str, hooks: Any, runs: Runs) -> None:
    gate = Gate()
    hooks("gate", gate)
    async with Client(settings=settings_for(dsn, lease=2.0, lease_margin=0.5)) as q:
        await q.dispatch_many([Probe(hook="gate", n=n) for n in range(3)])
        # No heartbeat: nothing renews the buffered leases while the first job holds the only slot.
        worker = await q.worker(concurrency=1, prefetch=2, listen=False, heartbeat=False)
        task = runs.start(worker, stop_when_empty=True)
        await wait_event(gate.first_started, "the first handler to start")
        await wait_until(lambda: len(worker.fetcher.buffer) == 2, "the buffer to fill")
        margin = worker.config.lease_margin
        await wait_until(lambda: all(i.deadline - time.monotonic() <= margin for i in worker.fetcher.buffer),
                         "the buffered leases to come within the lease margin of their end")
        gate.open.set()
        await finish(task, "the worker to drain")

    assert worker.fetcher.expired == 2
    # Handed back with their attempt given back, reserved again and run once each, on a fresh lease.
    assert sorted(gate.ran) == [(0, 1), (1, 1), (2, 1)]
    assert await jobs(dsn) == []
    assert await failures(dsn) == []


async def test_kill_9_with_a_full_buffer_loses_nothing(client: Client, spawn: Spawn, dsn: str) -> None:
    await create_ledger(dsn)
    holder = await _hold_lock(dsn)
    try:
        await client.dispatch_many([LedgerJob(dsn=dsn, n=n, lock=LOCK) for n in range(6)])
        first = await spawn(sys.executable, "-m", "tests.worker_process", "--dsn", dsn, "--concurrency", "1",
                            "--prefetch", "5", "--lease", "3", "--lease-margin", "0.5")
        await wait_until(lambda: _ledger(dsn, "started"), "the first worker to start a job")
        await wait_until(lambda: _all_reserved(dsn, 6), "the first worker to buffer the other five")
        await first.kill()  # SIGKILL with one job running and five buffered
    finally:
        await holder.execute("select pg_advisory_unlock(%s)", (LOCK,))
        await holder.close()

    # A second worker takes every job once the killed worker's 3 s leases have expired.
    second = await client.worker(concurrency=3, listen=False, poll_interval=0.2)
    assert await finish(second.run(max_jobs=6), "the second worker to run the six jobs") == 6
    assert await jobs(dsn) == []
    assert await failures(dsn) == []
    finished = await _ledger(dsn, "finished")
    assert sorted(r["n"] for r in finished) == list(range(6)), "a job was lost or finished twice"
    started_in_killed = {r["n"] for r in await _ledger(dsn, "started") if r["pid"] == first.proc.pid}
    assert len(started_in_killed) == 1, "a buffered job was started by the killed worker"


async def test_kill_9_spends_no_try_of_a_buffered_job(client: Client, spawn: Spawn, dsn: str) -> None:
    """tries = 1: the job that was running when its worker died has had its try (it fails as
    lease_expired_after_final_attempt); the five it had buffered never ran, so they keep theirs
    and run on the next worker."""
    await create_ledger(dsn)
    holder = await _hold_lock(dsn)
    try:
        await client.dispatch_many([LedgerOnce(dsn=dsn, n=n, lock=LOCK) for n in range(6)])
        first = await spawn(sys.executable, "-m", "tests.worker_process", "--dsn", dsn, "--concurrency", "1",
                            "--prefetch", "5", "--lease", "3", "--lease-margin", "0.5")
        await wait_until(lambda: _ledger(dsn, "started"), "the first worker to start a job")
        await wait_until(lambda: _all_reserved(dsn, 6), "the first worker to buffer the other five")
        await first.kill()  # SIGKILL with one job running and five buffered
    finally:
        await holder.execute("select pg_advisory_unlock(%s)", (LOCK,))
        await holder.close()

    [ran] = [r["n"] for r in await _ledger(dsn, "started")]
    second = await client.worker(concurrency=3, listen=False, poll_interval=0.2)
    assert await finish(second.run(max_jobs=5), "the second worker to run the five buffered jobs") == 5
    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert (failure["reason"], failure["attempts"]) == ("lease_expired_after_final_attempt", 1)
    finished = await _ledger(dsn, "finished")
    assert sorted(r["n"] for r in finished) == sorted(set(range(6)) - {ran})
    assert all(r["attempt"] == 1 for r in finished), "a buffered job lost a try it never ran"


async def test_a_buffered_job_once_started_counts_its_try(client: Client, spawn: Spawn, dsn: str) -> None:
    """The worker reports a buffered job started (pgqueue.mark_started, with its next acks): if it
    dies from then on, that attempt counts like any other."""
    await create_ledger(dsn)
    holder = await _hold_lock(dsn)
    try:
        await client.dispatch(LedgerOnce(dsn=dsn, n=0))  # quick; runs first
        await client.dispatch_many([LedgerOnce(dsn=dsn, n=n, lock=LOCK) for n in range(1, 4)])
        first = await spawn(sys.executable, "-m", "tests.worker_process", "--dsn", dsn, "--concurrency", "1",
                            "--prefetch", "3", "--lease", "3", "--lease-margin", "0.5")
        await wait_until(lambda: _started(dsn, 1), "the worker to start job 1 from its buffer")
        marked = "select count(*) from pgqueue.jobs where not prefetched and token is not null"
        await wait_until(lambda: equals(scalar(dsn, marked), 1), "job 1's start to be marked")
        await first.kill()
    finally:
        await holder.execute("select pg_advisory_unlock(%s)", (LOCK,))
        await holder.close()

    second = await client.worker(concurrency=2, listen=False, poll_interval=0.2)
    assert await finish(second.run(max_jobs=2), "the second worker to run jobs 2 and 3") == 2
    assert await jobs(dsn) == []
    [failure] = await failures(dsn)
    assert (failure["envelope"]["args"]["n"], failure["reason"]) == (1, "lease_expired_after_final_attempt")
    assert sorted(r["n"] for r in await _ledger(dsn, "finished")) == [0, 2, 3]


async def _started(dsn: str, n: int) -> bool:
    return any(r["n"] == n for r in await _ledger(dsn, "started"))


async def test_a_drain_with_start_marks_in_flight_acks_every_job_and_stops(client: Client, hooks: Any,
                                                                           dsn: str) -> None:
    """Start marks flush on their own while handlers keep finishing: every ack is sent (none is
    counted as answered without being sent) and the worker stops once the queue is empty."""
    async def quick(job: Probe, context: JobContext) -> None:
        await asyncio.sleep(0)

    hooks("quick", quick)
    await client.dispatch_many([Probe(hook="quick", n=n) for n in range(600)])
    worker = await client.worker(concurrency=10, prefetch=100, listen=False)
    assert await finish(worker.run(stop_when_empty=True), "the worker to drain 600 jobs and stop") == 600
    assert (worker.stats.acked, worker.completer.acked, worker.completer.pending) == (600, 600, 0)
    assert await jobs(dsn) == []


async def test_an_ack_added_while_start_marks_flush_is_sent_by_the_next_flush(client: Client, dsn: str) -> None:
    """A flush that carries only start marks must not take the list later acks go to: the ack
    added while it is in flight is sent (and the job deleted) by the next flush."""

    await client.dispatch_many([Probe(hook="unused", n=n) for n in range(2)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("update pgqueue.jobs set max_tries = 1")  # final tries: granted as prefetched
    store = Store(await client.pool())
    (started, finished), _ = await store.reserve(["default"], 2, 60.0, run_now=0)
    completer = Completer(store)
    marking = asyncio.create_task(completer.mark(started.id, started.token))
    await asyncio.sleep(0)  # the mark is waiting
    flushing = asyncio.create_task(completer.flush())
    await asyncio.sleep(0)  # the marks-only statement is on its way
    completer.add(finished.id, finished.token)
    assert await finish(marking, "the mark to be answered") is True
    await finish(flushing, "the marks to be flushed")
    await finish(completer.flush(), "the ack to be flushed")
    await finish(completer.wait_idle(), "the completer to be idle")
    assert (completer.acked, completer.pending) == (1, 0)
    left = await rows(dsn, "select id, prefetched from pgqueue.jobs")
    assert left == [{"id": started.id, "prefetched": False}]


async def _all_reserved(dsn: str, count: int) -> bool:
    return await _reserved(dsn) == count


async def test_two_workers_share_a_small_backlog_within_the_bound(client: Client, spawn: Spawn, dsn: str) -> None:
    await create_ledger(dsn)
    holder = await _hold_lock(dsn)
    try:
        await client.dispatch_many([LedgerJob(dsn=dsn, n=n, lock=LOCK) for n in range(8)])
        argv = (sys.executable, "-m", "tests.worker_process", "--dsn", dsn, "--concurrency", "2", "--prefetch", "3")
        first = await spawn(*argv)
        await wait_until(lambda: _all_reserved(dsn, 5), "the first worker to hold concurrency + prefetch")
        await wait_until(lambda: _two_started(dsn), "the first worker to start two handlers")
        assert await _reserved(dsn) == 5, "the first worker held more than concurrency + prefetch"
        second = await spawn(*argv)
        await wait_until(lambda: _all_reserved(dsn, 8), "the second worker to take the rest")
        await wait_until(lambda: _started_by_two(dsn), "the second worker to start its handlers")
    finally:
        await holder.execute("select pg_advisory_unlock(%s)", (LOCK,))
        await holder.close()
    await wait_until(lambda: _all_finished(dsn, 8), "every job to finish")
    for worker in (first, second):
        await worker.kill()
    finished = await _ledger(dsn, "finished")
    assert sorted(r["n"] for r in finished) == list(range(8)), "a job finished twice, or not at all"
    by_pid: dict[int, int] = {}
    for r in finished:
        by_pid[r["pid"]] = by_pid.get(r["pid"], 0) + 1
    assert sorted(by_pid.values()) == [3, 5], f"not shared within the bound: {by_pid}"


async def _two_started(dsn: str) -> bool:
    return len(await _ledger(dsn, "started")) == 2


async def _started_by_two(dsn: str) -> bool:
    return len({r["pid"] for r in await _ledger(dsn, "started")}) == 2


async def _all_finished(dsn: str, count: int) -> bool:
    return len(await _ledger(dsn, "finished")) == count


async def test_a_forced_stop_while_a_buffered_final_try_waits_for_its_mark_hands_it_back(
        client: Client, hooks: Any, runs: Runs, dsn: str) -> None:
    """A forced stop (a second SIGTERM) can cancel a buffered job on its final try while its start
    mark is on the way: the job is handed back (fenced, its try given back), not left reserved
    until its lease ends with that try spent unrun."""
    gate = Gate()
    hooks("gate", gate)
    ids = await client.dispatch_many([Probe(hook="gate", n=n) for n in range(2)])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("update pgqueue.jobs set max_tries = 1")  # job 1 is buffered on its final try
    worker = await client.worker(concurrency=1, prefetch=1, listen=False)
    task = runs.start(worker)
    await wait_event(gate.first_started, "the first handler to start")
    await wait_until(lambda: len(worker.fetcher.buffer) == 1, "job 1 to wait in the buffer")
    assert worker.fetcher.buffer[0].reservation.prefetched

    async with await psycopg.AsyncConnection.connect(dsn) as locker:
        await locker.execute("select 1 from pgqueue.jobs where id = %s for update", (ids[1],))
        gate.open.set()  # job 0 ends: job 1 leaves the buffer and waits for its mark (held by the row lock)
        await wait_until(lambda: equals(lock_waits(dsn), 1), "job 1's start mark to wait for the row lock")
        worker.stop(cancel_running=True)
        await wait_until(lambda: equals(lock_waits(dsn), 2), "the hand-back to wait behind the mark")
        await locker.rollback()
    await finish(task, "the worker to stop")

    assert gate.ran == [(0, 1)], "job 1 ran after the forced stop"
    [left] = await jobs(dsn)
    assert left["id"] == ids[1]
    assert (left["token"], left["attempts"]) == (None, 0), "job 1 was not handed back with its try"
