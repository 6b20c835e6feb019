"""Worker processes that die: kill -9 at random moments, SIGTERM, and a job that kills its worker."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest

from pgqueue import Client
from tests.faults.fault_jobs import LedgerJob, PoisonJob
from tests.faults.harness import FaultReport, WorkerFleet, dispatch, scalar, wait_until
from tests.faults.ledger import check_ledger

JOBS = int(os.environ.get("PGQUEUE_FAULT_JOBS", "20000"))
KILLS = 5
SEED = int(os.environ.get("PGQUEUE_FAULT_SEED", "7"))


def remaining(dsn: str) -> int:
    return int(scalar(dsn, "select count(*) from pgqueue.jobs"))


def executions(dsn: str) -> int:
    return int(scalar(dsn, "select count(*) from fault_ledger"))


@pytest.mark.slow
async def test_kill_9_at_random_moments_loses_nothing(ledger_dsn: str, producer: Client, fleet: WorkerFleet,
                                                      fault_pyproject: Path, fault_report: FaultReport) -> None:
    rng = random.Random(SEED)
    workers = [fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=20) for _ in range(3)]
    await dispatch(producer, [LedgerJob(n=i, work=0.001) for i in range(JOBS)])
    # Kill at random points of progress (measured by the ledger), not at random times: the
    # schedule is the same however fast the machine is.
    thresholds = sorted(rng.sample(range(JOBS // 20, JOBS * 9 // 10), KILLS))
    for threshold in thresholds:
        await wait_until(lambda t=threshold: executions(ledger_dsn) >= t, within=60,
                         what=f"{threshold} executions", fleet=fleet)
        victim = rng.choice([w for w in workers if w.alive()])
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        victim.start()  # a supervisor restarts it; its leased jobs wait for their leases to expire
    await wait_until(lambda: remaining(ledger_dsn) == 0, within=60, what="the backlog is done", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0], fleet.logs()[-3000:]

    report = check_ledger(ledger_dsn)
    assert report.completed == JOBS and report.failed == 0
    # The kills landed while jobs were held: some were completed only after their lease expired.
    recovered = int(scalar(ledger_dsn, "select count(*) from fault_acks where kind = 'ack' and attempts > 1"))
    assert recovered > 0
    fault_report.add("kill -9 of 1 of 3 workers at random points (restarted)", KILLS, report,
                     recovered_after_lease_expiry=recovered)


async def test_sigterm_finishes_running_handlers_and_exits_0(ledger_dsn: str, producer: Client,
                                                            fleet: WorkerFleet, fault_pyproject: Path,
                                                            fault_report: FaultReport) -> None:
    total = 400
    worker = fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=8)
    await dispatch(producer, [LedgerJob(n=i, work=0.2) for i in range(total)])
    await wait_until(lambda: executions(ledger_dsn) >= 20, within=30, what="20 executions", fleet=fleet)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log_text()[-3000:]

    # Every handler that started finished and was acknowledged; nothing is left reserved.
    started = executions(ledger_dsn)
    assert scalar(ledger_dsn, "select count(*) from fault_ledger l where not exists "
                              "(select 1 from fault_acks a where a.job_id = l.job_id and a.token = l.token)") == 0
    assert scalar(ledger_dsn, "select count(*) from pgqueue.jobs where token is not null") == 0
    assert started < total
    # Jobs reserved but never started were handed back with their attempt returned.
    assert scalar(ledger_dsn, "select count(*) from pgqueue.jobs where attempts > 0") == 0

    finisher = fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=50, stop_when_empty=True)
    assert finisher.wait(60) == 0, finisher.log_text()[-3000:]
    report = check_ledger(ledger_dsn)
    assert report.completed == total and report.reruns == 0
    fault_report.add("SIGTERM during a run (then a new worker drains)", 1, report)


@pytest.mark.slow
async def test_poison_job_that_kills_its_worker_ends_in_failed_jobs(ledger_dsn: str, producer: Client,
                                                                   fleet: WorkerFleet, fault_pyproject: Path,
                                                                   fault_report: FaultReport) -> None:
    others = 30
    worker = fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=4)
    await dispatch(producer, [PoisonJob(n=0), *(LedgerJob(n=i, work=0.01) for i in range(others))])
    crashes = 0
    # A supervisor's loop: restart the worker whenever the poison job killed it.
    while remaining(ledger_dsn) > 0:
        await wait_until(lambda: not worker.alive() or remaining(ledger_dsn) == 0, within=30,
                         what="the worker dies or the backlog is done", fleet=fleet)
        if not worker.alive():
            assert worker.wait(1) == 17
            crashes += 1
            assert crashes <= PoisonJob.tries, "the poison job ran more often than its tries"
            worker.start()
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0

    report = check_ledger(ledger_dsn)
    assert crashes == PoisonJob.tries
    assert (report.completed, report.failed) == (others, 1)
    assert report.failure_reasons == {"lease_expired_after_final_attempt": 1}
    assert scalar(ledger_dsn, "select attempts from pgqueue.failed_jobs") == PoisonJob.tries
    fault_report.add("poison job: os._exit in the handler, every attempt", crashes, report)
