"""Leases: a handler that outlives its lease, and a failure record that cannot be written."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pgqueue import Client
from tests.faults.fault_jobs import AlwaysFailsJob, LedgerJob, OutlivesLeaseJob
from tests.faults.harness import FaultReport, WorkerFleet, dispatch, scalar, wait_until
from tests.faults.ledger import check_ledger


@pytest.mark.slow
async def test_handler_outliving_its_lease_is_not_acknowledged(ledger_dsn: str, producer: Client,
                                                               fleet: WorkerFleet, fault_pyproject: Path,
                                                               fault_report: FaultReport) -> None:
    first = fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=1)
    [job_id] = await producer.dispatch_many([OutlivesLeaseJob(n=1)])
    await wait_until(lambda: scalar(ledger_dsn, "select count(*) from fault_ledger") == 1, within=30,
                     what="the first holder runs the job", fleet=fleet)
    # The first holder's event loop is now blocked inside the handler: its lease (3 s) expires
    # and a second worker reserves the job and completes it.
    second = fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=4)
    await dispatch(producer, [LedgerJob(n=i) for i in range(20)])
    await wait_until(lambda: "ack was refused" in first.log_text(), within=40,
                     what="the first holder's late ack is refused and logged", fleet=fleet)
    await wait_until(lambda: scalar(ledger_dsn, "select count(*) from pgqueue.jobs") == 0, within=30,
                     what="the backlog is done", fleet=fleet)
    for worker in (first, second):
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.log_text()[-3000:]

    runs = [tuple(r) for r in _rows(ledger_dsn, "select attempt, token, worker_pid from fault_ledger "
                                                "where job_id = %s order by token", job_id)]
    assert [(a, pid) for a, _, pid in runs] == [(1, first.pid), (2, second.pid)]
    acks = _rows(ledger_dsn, "select token, attempts, kind from fault_acks where job_id = %s", job_id)
    assert acks == [(runs[1][1], 2, "ack")]  # exactly one accepted completion: the second holder's
    assert f"job {job_id} finished but its ack was refused" in first.log_text()
    report = check_ledger(ledger_dsn)
    assert (report.completed, report.reruns) == (21, 1)
    fault_report.add("lease expires while the handler runs (blocked loop)", 1, report)


@pytest.mark.slow
async def test_failure_record_that_cannot_be_written_keeps_the_job(ledger_dsn: str, producer: Client,
                                                                   fleet: WorkerFleet, fault_pyproject: Path,
                                                                   fault_report: FaultReport) -> None:
    _execute(ledger_dsn, """
        create function fault_refuse_failure() returns trigger language plpgsql as $$
        begin raise exception 'fault injected: failed_jobs refuses inserts'; end $$;
        create trigger fault_refuse_failure before insert on pgqueue.failed_jobs
            for each row execute function fault_refuse_failure();
    """)
    worker = fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=4)
    [job_id] = await producer.dispatch_many([AlwaysFailsJob(n=1)])
    await wait_until(lambda: "recording the failure of job" in worker.log_text(), within=30,
                     what="recording the failure fails", fleet=fleet)
    # The job was neither lost nor recorded: it stays reserved, on its final attempt.
    assert _rows(ledger_dsn, "select attempts, token is not null from pgqueue.jobs where id = %s", job_id) \
        == [(2, True)]
    assert scalar(ledger_dsn, "select count(*) from pgqueue.failed_jobs") == 0

    # While the insert still fails, the lease expires: reserving (which moves the expired final
    # attempt to failed_jobs) fails too, and the worker must back off, not die.
    await wait_until(lambda: "reserving failed" in worker.log_text() or not worker.alive(), within=30,
                     what="a reservation meets the refusing trigger", fleet=fleet)
    assert worker.alive(), worker.log_text()[-3000:]
    await dispatch(producer, [LedgerJob(n=i) for i in range(20)])
    _execute(ledger_dsn, "drop trigger fault_refuse_failure on pgqueue.failed_jobs")
    await wait_until(lambda: scalar(ledger_dsn, "select count(*) from pgqueue.jobs") == 0, within=30,
                     what="the backlog is done", fleet=fleet)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log_text()[-3000:]

    report = check_ledger(ledger_dsn)
    assert (report.completed, report.failed) == (20, 1)
    assert report.failure_reasons == {"lease_expired_after_final_attempt": 1}
    fault_report.add("failed_jobs insert raises (trigger), then fixed", 2, report)


def _rows(dsn: str, statement: str, *params: object) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement.encode(), params or None).fetchall()


def _execute(dsn: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement.encode())
