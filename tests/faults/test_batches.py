"""Issue 26 §2 under load and crashes: a batch of 2,000 members on 4 worker processes releases its
callback exactly once — every member counted once by the statement that ended it (ack, fail,
cancel), the last count releasing the callback — also when a worker is killed with SIGKILL
mid-run (its leased members end later, after their leases expire, and are counted then)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pgqueue import Batch, Client, Job
from tests.faults.batch_chaos import run_batch_chaos
from tests.faults.fault_jobs import AlwaysFailsJob, BatchCallbackJob, LedgerJob
from tests.faults.harness import FaultReport, WorkerFleet, scalar, wait_until
from tests.faults.ledger import check_ledger

MEMBERS = 2000
FAILING = 40
CANCELLED = 60
WORKERS = 4


async def _dispatch_batch(producer: Client) -> Batch:
    """MEMBERS members: FAILING that fail terminally, CANCELLED cancelled before any worker runs."""
    members: list[Job] = [LedgerJob(n=i, work=0.001) for i in range(MEMBERS - FAILING)]
    members += [AlwaysFailsJob(n=i) for i in range(FAILING)]
    batch = await producer.batch(members, then=BatchCallbackJob())
    for member in batch.members[:CANCELLED]:
        assert await producer.cancel(member) == "cancelled"
    return batch


def _ledger(dsn: str) -> int:
    """check_ledger's completed count. pgqueue.cancel deletes the job before it records the
    failure (two statements), so the ledger's delete trigger took the cancelled members' deletes
    for acks: they are failures, and marked so first."""
    marked = scalar(dsn, "with m as (update fault_acks a set kind = 'fail' from pgqueue.failed_jobs f "
                         "where f.job_id = a.job_id and f.reason = 'cancelled' and a.token is null returning 1) "
                         "select count(*) from m")
    assert marked == CANCELLED
    return check_ledger(dsn).completed


def _executions(dsn: str, job_id: object = None) -> int:
    if job_id is None:
        return int(scalar(dsn, "select count(*) from fault_ledger"))
    return int(scalar(dsn, "select count(*) from fault_ledger where job_id = %s", (job_id,)))


def _check_released_once(dsn: str, batch: Batch) -> None:
    row = scalar(dsn, "select row(pending, succeeded, failed, cancelled)::text from pgqueue.batches where id = %s",
                 (batch.id,))
    assert row == f"(0,{MEMBERS - FAILING - CANCELLED},{FAILING},{CANCELLED})"
    # One token was ever issued for the callback: it became reservable once, was run once and acked.
    assert scalar(dsn, "select count(*) from fault_reservations where job_id = %s", (batch.callback,)) == 1
    assert _executions(dsn, batch.callback) == 1
    assert scalar(dsn, "select count(*) from fault_acks where job_id = %s and kind = 'ack'", (batch.callback,)) == 1
    # The callback read the final counts, in the transaction-visible state after the last member's end.
    seen = scalar(dsn, "select data::text from fault_echo where job_id = %s and text = 'batch'", (batch.callback,))
    assert seen == (f'{{"total": {MEMBERS}, "failed": {FAILING}, "pending": 0, "cancelled": {CANCELLED}, '
                    f'"succeeded": {MEMBERS - FAILING - CANCELLED}}}')
    assert scalar(dsn, "select count(*) from pgqueue.batch_members where batch_id = %s and outcome is null",
                  (batch.id,)) == 0


async def _run_to_the_callback(dsn: str, fleet: WorkerFleet, pyproject: Path, batch: Batch, *,
                               kill_at: int | None) -> None:
    workers = [fleet.start(dsn, pyproject=pyproject, concurrency=20) for _ in range(WORKERS)]
    if kill_at is not None:
        await wait_until(lambda: _executions(dsn) >= kill_at, within=60, what=f"{kill_at} executions", fleet=fleet)
        victim = workers[1]
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        victim.start()
    await wait_until(lambda: scalar(dsn, "select count(*) from fault_acks where job_id = %s", (batch.callback,)) == 1,
                     within=60, what="the callback has run and been acked", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0] * WORKERS, fleet.logs()[-3000:]


async def test_a_batch_of_2000_on_4_workers_releases_its_callback_once(ledger_dsn: str, producer: Client,
                                                                      fleet: WorkerFleet,
                                                                      fault_pyproject: Path) -> None:
    batch = await _dispatch_batch(producer)
    await _run_to_the_callback(ledger_dsn, fleet, fault_pyproject, batch, kill_at=None)
    _check_released_once(ledger_dsn, batch)
    assert _ledger(ledger_dsn) == MEMBERS - FAILING - CANCELLED + 1  # the members that succeeded, and the callback


async def test_a_worker_killed_mid_batch_still_releases_the_callback_once(ledger_dsn: str, producer: Client,
                                                                         fleet: WorkerFleet,
                                                                         fault_pyproject: Path) -> None:
    batch = await _dispatch_batch(producer)
    await _run_to_the_callback(ledger_dsn, fleet, fault_pyproject, batch, kill_at=MEMBERS // 2)
    _check_released_once(ledger_dsn, batch)
    # The kill landed while the victim held members: they ended only after their leases expired.
    assert scalar(ledger_dsn, "select count(*) from fault_acks where kind = 'ack' and attempts > 1") > 0
    assert _ledger(ledger_dsn) == MEMBERS - FAILING - CANCELLED + 1


async def test_a_batch_under_repeated_sigkills_releases_its_callback_once(ledger_dsn: str, producer: Client,
                                                                         fleet: WorkerFleet, fault_pyproject: Path,
                                                                         fault_report: FaultReport) -> None:
    """Several kills (one at each fifth of the members ended, rotating over the workers): the
    callback is released once, run and acked once, and every member ended exactly once."""
    figures, ledger = await run_batch_chaos(ledger_dsn, fleet, fault_pyproject, producer, members=3000,
                                            workers=WORKERS, kill_at=(0.2, 0.4, 0.6, 0.8))
    assert figures.kills == 4 and figures.callback_releases == 1
    fault_report.add("batch: 3,000 members, 4 SIGKILLs", figures.kills, ledger, **figures.as_row())


@pytest.mark.skipif(not os.environ.get("PGQUEUE_BATCH_CHAOS_MEMBERS"),
                    reason="the issue's full size, on demand: PGQUEUE_BATCH_CHAOS_MEMBERS=100000 "
                           "(PGQUEUE_BATCH_CHAOS_WORKERS, PGQUEUE_BATCH_CHAOS_KILL_EVERY seconds)")
@pytest.mark.timeout(3600)
async def test_full_size_batch_under_a_sigkill_every_few_seconds(ledger_dsn: str, producer: Client,
                                                                 fleet: WorkerFleet, fault_pyproject: Path,
                                                                 fault_report: FaultReport) -> None:
    """Issue 26: 100,000 members finishing on 4 workers, one killed with SIGKILL every 3 s."""
    members = int(os.environ["PGQUEUE_BATCH_CHAOS_MEMBERS"])
    workers = int(os.environ.get("PGQUEUE_BATCH_CHAOS_WORKERS", "4"))
    every = float(os.environ.get("PGQUEUE_BATCH_CHAOS_KILL_EVERY", "3"))
    figures, ledger = await run_batch_chaos(ledger_dsn, fleet, fault_pyproject, producer, members=members,
                                            workers=workers, kill_every=every, within=3600)
    print(f"\nbatch chaos: {figures.as_row()}")  # the figures of an on-demand run
    fault_report.add(f"batch: {members:,} members, SIGKILL every {every:g}s", figures.kills, ledger,
                     **figures.as_row())
    assert figures.kills >= 1
