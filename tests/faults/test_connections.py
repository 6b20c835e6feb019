"""The database connection under faults: terminated backends, a server restart, a statement
timeout on reservation, an exhausted pool."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgqueue import Client, Worker
from pgqueue.embedded import EmbeddedPostgres
from pgqueue.store import Store
from tests.faults.fault_jobs import LedgerJob
from tests.faults.harness import FaultReport, WorkerFleet, dispatch, fault_settings, scalar, wait_until
from tests.faults.ledger import check_ledger, install_ledger

APP = "fault_worker"
LISTENERS = ("select count(*) from pg_stat_activity where application_name = %s and query ilike '%%listen pgqueue%%'")


def remaining(dsn: str) -> int:
    return int(scalar(dsn, "select count(*) from pgqueue.jobs"))


def executions(dsn: str) -> int:
    return int(scalar(dsn, "select count(*) from fault_ledger"))


def listeners(dsn: str) -> int:
    return int(scalar(dsn, LISTENERS, (APP,)))


async def test_terminated_backends_and_listener_are_replaced(ledger_dsn: str, producer: Client,
                                                             fleet: WorkerFleet, fault_pyproject: Path,
                                                             fault_report: FaultReport) -> None:
    rounds, total = 6, 3000
    worker_dsn = make_conninfo(ledger_dsn, application_name=APP)
    # A long poll interval: after the faults, only a working LISTEN wakes an idle worker in time.
    workers = [fleet.start(worker_dsn, ledger_dsn=ledger_dsn, pyproject=fault_pyproject, concurrency=10,
                           poll_interval=60) for _ in range(2)]
    await wait_until(lambda: listeners(ledger_dsn) == 2, within=30, what="both workers LISTEN", fleet=fleet)
    await dispatch(producer, [LedgerJob(n=i, work=0.002) for i in range(total)])
    terminated = listeners_terminated = 0
    for _ in range(rounds):
        before = executions(ledger_dsn)
        if remaining(ledger_dsn) == 0:
            break
        listeners_terminated += listeners(ledger_dsn)
        terminated += int(scalar(ledger_dsn, "select count(pg_terminate_backend(pid)) from pg_stat_activity "
                                             "where application_name = %s", (APP,)))
        await wait_until(lambda b=before: executions(ledger_dsn) >= min(b + 200, total) or remaining(ledger_dsn) == 0,
                         within=30, what="progress after terminating the workers' backends", fleet=fleet)
    await wait_until(lambda: remaining(ledger_dsn) == 0, within=60, what="the backlog is done", fleet=fleet)
    await wait_until(lambda: listeners(ledger_dsn) == 2, within=30, what="both workers LISTEN again", fleet=fleet)
    # Idle workers with a 60 s poll interval pick up new jobs at once: their LISTEN works again.
    await dispatch(producer, [LedgerJob(n=total + i) for i in range(100)])
    await wait_until(lambda: remaining(ledger_dsn) == 0, within=20, what="NOTIFY wakes the idle workers",
                     fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0], fleet.logs()[-3000:]

    assert terminated > 0 and listeners_terminated > 0
    assert "the LISTEN connection failed" in fleet.logs()
    report = check_ledger(ledger_dsn)
    assert report.completed == total + 100
    fault_report.add(f"pg_terminate_backend of pooled + LISTEN connections ({listeners_terminated} listeners)",
                     terminated, report)


@pytest.fixture
async def owned_dsn(owned_server: EmbeddedPostgres) -> AsyncIterator[str]:
    """The owned server's migrated database ``app``, with the ledger installed."""
    dsn = owned_server.dsn("app")
    install_ledger(dsn)
    yield dsn


@pytest.mark.slow
async def test_postgres_restart_mid_run(owned_server: EmbeddedPostgres, owned_dsn: str, fleet: WorkerFleet,
                                        fault_pyproject: Path, fault_report: FaultReport) -> None:
    total, late = 3000, 200
    worker_dsn = make_conninfo(owned_dsn, application_name=APP)
    workers = [fleet.start(worker_dsn, ledger_dsn=owned_dsn, pyproject=fault_pyproject, concurrency=10,
                           poll_interval=60) for _ in range(2)]
    await wait_until(lambda: listeners(owned_dsn) == 2, within=30, what="both workers LISTEN", fleet=fleet)
    producer = Client(settings=fault_settings(owned_dsn, fault_pyproject))
    try:
        await producer.open()
        await dispatch(producer, [LedgerJob(n=i, work=0.002) for i in range(total)])
        await producer.close()
        await wait_until(lambda: executions(owned_dsn) >= total // 3, within=60, what="a third of the run",
                         fleet=fleet)
        await asyncio.to_thread(owned_server.restart, "fast")
        await wait_until(lambda: remaining(owned_dsn) == 0, within=60, what="the backlog is done after the restart",
                         fleet=fleet)
        await wait_until(lambda: listeners(owned_dsn) == 2, within=30, what="both workers LISTEN again",
                         fleet=fleet)
        # Idle workers (60 s poll interval) wake at once for new jobs: the listener re-LISTENed.
        await producer.open()
        await dispatch(producer, [LedgerJob(n=total + i) for i in range(late)])
        await wait_until(lambda: remaining(owned_dsn) == 0, within=20, what="NOTIFY wakes the idle workers",
                         fleet=fleet)
    finally:
        await producer.close()
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0], fleet.logs()[-3000:]

    report = check_ledger(owned_dsn)
    assert report.completed == total + late
    fault_report.add("PostgreSQL restart (fast shutdown) mid-run", 1, report)


async def test_statement_timeout_on_reservation(ledger_dsn: str, producer: Client, fleet: WorkerFleet,
                                                fault_pyproject: Path, fault_report: FaultReport) -> None:
    total = 600
    # Every statement of the worker is cancelled by the server after 300 ms.
    worker_dsn = make_conninfo(ledger_dsn, options="-c statement_timeout=300")
    # prefetch 0: a reservation per batch of free slots, so the statements the lock blocks are
    # reservations (with a prefetch buffer they are mostly the completer's acks).
    worker = fleet.start(worker_dsn, ledger_dsn=ledger_dsn, pyproject=fault_pyproject, concurrency=10, prefetch=0)
    await dispatch(producer, [LedgerJob(n=i, work=0.005) for i in range(total)])
    await wait_until(lambda: executions(ledger_dsn) >= 100, within=30, what="100 executions", fleet=fleet)
    injected = 0
    async with await psycopg.AsyncConnection.connect(ledger_dsn) as blocker:
        for _ in range(2):
            async with blocker.transaction():
                await blocker.execute("lock table pgqueue.jobs in access exclusive mode")
                injected += 1
                await wait_until(lambda n=injected: worker.log_text().count("canceling statement due to statement "
                                                                            "timeout") >= n,
                                 within=30, what="a reservation times out", fleet=fleet)
    await wait_until(lambda: remaining(ledger_dsn) == 0, within=60, what="the backlog is done", fleet=fleet)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log_text()[-3000:]
    assert "reserving failed" in worker.log_text()

    report = check_ledger(ledger_dsn)
    assert report.completed == total
    fault_report.add("statement timeout on reservation (table locked)", injected, report)


async def test_pool_exhaustion_backs_off_and_continues(in_process_ledger: str, producer: Client,
                                                       caplog: pytest.LogCaptureFixture,
                                                       fault_report: FaultReport) -> None:
    dsn, total = in_process_ledger, 300
    config = producer.connection()
    # The worker's pool: two connections, and a checkout gives up after 0.3 s.
    pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[object, ...]]] = AsyncConnectionPool(
        dsn, min_size=2, max_size=2, timeout=0.3, open=False, kwargs={"autocommit": True})
    await pool.open(wait=True)
    try:
        worker = Worker(config, Store(pool), dsn=producer.dsn, queues=["default"], concurrency=8, listen=False,
                        poll_interval=0.2)
        await dispatch(producer, [LedgerJob(n=i, work=0.005) for i in range(total)])
        caplog.set_level(logging.WARNING, logger="pgqueue")
        task = asyncio.create_task(worker.run(stop_when_empty=True))
        await wait_until(lambda: executions(dsn) >= 50, within=30, what="50 executions")
        held = [await pool.getconn(), await pool.getconn()]  # every connection of the worker's pool
        try:
            await wait_until(lambda: any("reserving failed" in r.getMessage() for r in caplog.records),
                             within=30, what="a reservation finds no free connection")
        finally:
            for conn in held:
                await pool.putconn(conn)
        await asyncio.wait_for(task, 60)
    finally:
        await pool.close()
    report = check_ledger(dsn)
    assert report.completed == total
    timeouts = sum("reserving failed" in r.getMessage() for r in caplog.records)
    fault_report.add("worker pool exhausted (all connections held)", timeouts, report)
