"""The worker under faults: SIGTERM on a real ``pgqueue queue:work``, kill -9 mid-job, a killed
LISTEN connection, and a database restart in the middle of a backlog."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import Client, JobContext
from pgqueue.embedded import EmbeddedPostgres
from pgqueue.resources import query
from tests.worker_jobs import LedgerJob, Probe
from tests.worker_support import (
    Runs,
    Spawned,
    client,
    create_ledger,
    failures,
    finish,
    hooks,
    jobs,
    rows,
    runs,
    scalar,
    settings_for,
    spawn,
    wait_event,
    wait_until,
)

__all__ = ["client", "hooks", "runs", "spawn"]

Spawn = Callable[..., Awaitable[Spawned]]
LOCK = 4_2424  # the advisory lock a LedgerJob waits for while the test holds it
PGQUEUE = str(Path(sys.executable).with_name("pgqueue"))


async def _ledger(dsn: str, event: str) -> list[dict[str, Any]]:
    return await rows(dsn, "select n, attempt, token, pid from test_ledger where event = %s order by at", (event,))


async def _hold_lock(dsn: str) -> psycopg.AsyncConnection[Any]:
    holder = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await holder.execute("select pg_advisory_lock(%s)", (LOCK,))
    return holder


async def test_sigterm_on_queue_work_drains_and_exits_0(client: Client, spawn: Spawn, dsn: str) -> None:
    await create_ledger(dsn)
    holder = await _hold_lock(dsn)
    try:
        await client.dispatch_many([LedgerJob(dsn=dsn, n=n, lock=LOCK) for n in range(4)])
        worker = await spawn(PGQUEUE, "queue:work", "--dsn", dsn, "--app", "tests.worker_jobs",
                             "--queue", "default", "--concurrency", "2")
        started = await wait_until(lambda: _two(_ledger(dsn, "started")), "two handlers to start in the worker")

        worker.proc.send_signal(signal.SIGTERM)
        await worker.wait_for_line("SIGTERM", "the worker to take SIGTERM")
        assert worker.proc.returncode is None, f"the worker exited with handlers still running:\n{worker.output}"
        await holder.execute("select pg_advisory_unlock(%s)", (LOCK,))

        assert await worker.exit_code("the worker to drain and exit") == 0, worker.output
    finally:
        await holder.close()

    finished = await _ledger(dsn, "finished")
    assert sorted(r["n"] for r in finished) == sorted(r["n"] for r in started), worker.output
    left = await jobs(dsn)
    assert len(left) == 2
    assert all(r["attempts"] == 0 and r["token"] is None for r in left), "a job was reserved after SIGTERM"


async def _two(pending: Awaitable[list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
    found = await pending
    assert len(found) <= 2, f"more handlers started than the concurrency allows: {found}"
    return found if len(found) == 2 else None


async def test_killed_worker_job_goes_to_another_worker_and_the_stale_holder_cannot_settle(
        client: Client, spawn: Spawn, dsn: str) -> None:
    await create_ledger(dsn)
    holder = await _hold_lock(dsn)
    try:
        job_id = await client.dispatch(LedgerJob(dsn=dsn, n=1, lock=LOCK))
        first = await spawn(sys.executable, "-m", "tests.worker_process", "--dsn", dsn, "--concurrency", "1",
                            "--lease", "3", "--lease-margin", "0.5")
        [stale] = await wait_until(lambda: _ledger(dsn, "started"), "the first worker to start the job")

        await first.kill()  # SIGKILL mid-job: no ack, no release, no goodbye
        [row] = await jobs(dsn)
        assert row["token"] == stale["token"], "the job left the killed worker before the kill (handler timeout?)"

        # A second worker takes the job once the 3 s lease has expired (it sleeps until then).
        second = await client.worker(concurrency=1, listen=False, poll_interval=600)
        run = asyncio.create_task(second.run(max_jobs=1))
        started = await wait_until(lambda: _attempt(_ledger(dsn, "started"), 2), "the second worker's attempt")
        assert started["pid"] != stale["pid"]
        assert started["token"] != stale["token"]

        # The killed worker's token is dead: every transition is refused and changes nothing.
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            refused = await (await conn.execute(query("ack"), ([job_id], [stale["token"]], [0.0], [0.0],
                                                                 False))).fetchall()
            released = await (await conn.execute(query("release"), (job_id, stale["token"], 0.0, 0.0, 0.0))).fetchone()
            failed = await (await conn.execute(query("fail"), (job_id, stale["token"], None, "stale", None,
                                                               "exception", 0.0, 0.0))).fetchone()
            extended = await (await conn.execute(query("extend"), (job_id, stale["token"], 60.0))).fetchall()
        assert refused == [(job_id,)]
        assert released == (False,) and failed == (False,) and extended == []
        [row] = await jobs(dsn)
        assert (row["token"], row["attempts"]) == (started["token"], 2)

        await holder.execute("select pg_advisory_unlock(%s)", (LOCK,))
        assert await finish(run, "the second worker to finish the job") == 1
    finally:
        await holder.close()

    assert await jobs(dsn) == []
    assert await failures(dsn) == []
    assert [(r["attempt"], r["token"]) for r in await _ledger(dsn, "finished")] == [(2, started["token"])]


async def _attempt(pending: Awaitable[list[dict[str, Any]]], attempt: int) -> dict[str, Any] | None:
    return next((r for r in await pending if r["attempt"] == attempt), None)


async def test_worker_wakes_after_its_listen_connection_is_killed(client: Client, hooks: Any, runs: Runs,
                                                                  dsn: str) -> None:
    ran = asyncio.Event()

    async def mark(job: Probe, context: JobContext) -> None:
        ran.set()

    hooks("mark", mark)
    worker = await client.worker(concurrency=1, poll_interval=600)
    notifier = worker.notifier
    assert notifier is not None
    task = runs.start(worker)
    await wait_event(notifier.connected, "the worker's LISTEN connection")
    listener_sql = ("select pid from pg_stat_activity where datname = current_database()"
                    " and query ilike 'listen pgqueue%%' and state = 'idle'")
    killed = await wait_until(lambda: scalar(dsn, listener_sql), "the LISTEN backend in pg_stat_activity")

    assert await scalar(dsn, "select pg_terminate_backend(%s)", (killed,)) is True

    await wait_until(lambda: notifier.reconnects >= 1 and notifier.connected.is_set(),
                     "the notifier to reconnect")
    listener = await wait_until(lambda: scalar(dsn, listener_sql), "the new LISTEN backend")
    assert listener != killed
    await wait_event(worker.idle, "the worker to go idle again")

    await client.dispatch(Probe(hook="mark"))

    await wait_event(ran, "the job to run: the worker must wake on NOTIFY after re-LISTENing (poll is 600 s)")
    worker.stop()
    assert await finish(task, "the worker to stop") == 1


@pytest.mark.slow
async def test_database_restart_mid_run_loses_nothing(owned_server: EmbeddedPostgres, runs: Runs) -> None:
    dsn = owned_server.dsn("app")
    before, blocked = 50, 150
    total = before + blocked
    await create_ledger(dsn)
    holder = await _hold_lock(dsn)  # dies with the restart, which frees the lock
    # A short lease so jobs caught by the restart come back quickly; a job timeout that fits in it.
    async with Client(settings=settings_for(dsn, lease=4.0, lease_margin=1.0, timeout=2.0)) as client:
        await client.dispatch_many([LedgerJob(dsn=dsn, n=n) for n in range(before)])
        await client.dispatch_many([LedgerJob(dsn=dsn, n=n, lock=LOCK) for n in range(before, total)])
        worker = await client.worker(concurrency=4, poll_interval=1.0)
        task = runs.start(worker)
        finished_sql = "select count(distinct n) from test_ledger where event = 'finished'"
        started_sql = "select count(distinct n) from test_ledger where event = 'started'"
        await wait_until(lambda: _at_least(scalar(dsn, finished_sql), before), f"the first {before} jobs")
        await wait_until(lambda: _at_least(scalar(dsn, started_sql), before + 4),
                         "four handlers to block on the lock")

        await asyncio.to_thread(owned_server.restart)  # four handlers in flight, the rest of the backlog queued
        with contextlib.suppress(psycopg.Error):
            await holder.close()
        assert not task.done(), "the worker died with the database"
        assert await scalar(dsn, finished_sql) == before

        async def all_done() -> bool:
            done = await scalar(dsn, finished_sql)
            live = await scalar(dsn, "select count(*) from pgqueue.jobs")
            return bool(done == total and live == 0)

        await wait_until(all_done, f"all {total} jobs to finish after the restart", within=90, interval=0.1)
        worker.stop()
        await finish(task, "the worker to stop")

    assert await failures(dsn) == []
    assert await scalar(dsn, finished_sql) == total


async def _at_least(pending: Awaitable[Any], count: int) -> bool:
    return bool(await pending >= count)
