"""Issue 26 §1 under a crash: a ``result()`` waiter whose job's worker is killed with SIGKILL keeps
waiting (the killed worker ends nothing, so nothing wakes it with an error), and gets the value of
the attempt that runs once the lease has expired, on another worker; the sync waiter too."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from pgqueue import Client
from tests.faults.fault_jobs import ResultAfterCrashJob
from tests.faults.harness import WorkerFleet, fault_settings, scalar, wait_until, write_pyproject


async def test_a_result_waiter_outlives_the_death_of_its_jobs_worker(ledger_dsn: str, fleet: WorkerFleet,
                                                                     tmp_path: Path) -> None:
    # A 6 s lease and a 4 s timeout: the first attempt sleeps 3 s, time for the kill.
    pyproject = write_pyproject(tmp_path, {"lease": 6, "lease_margin": 1, "timeout": 4})
    async with Client(settings=fault_settings(ledger_dsn, pyproject)) as client:
        handle = await client.dispatch(ResultAfterCrashJob())
        waiter = asyncio.create_task(handle.result(timeout=120))
        sync_waiter = asyncio.create_task(asyncio.to_thread(handle.result_sync, 120))
        first = fleet.start(ledger_dsn, pyproject=pyproject, concurrency=1)
        await wait_until(lambda: scalar(ledger_dsn, "select count(*) from fault_ledger where job_id = %s",
                                        (handle,)) == 1, within=60, what="the first attempt runs", fleet=fleet)
        first.signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        # No worker is alive: the job cannot end, and both waiters still wait for it.
        status = await handle.status()
        assert status.state == "running" and status.attempts == 1
        assert not waiter.done() and not sync_waiter.done()
        fleet.start(ledger_dsn, pyproject=pyproject, concurrency=1)  # runs it once the lease has expired
        assert await waiter == 20 and await sync_waiter == 20
        # The killed attempt is in the job's history, as the lease that expired.
        assert [(a.attempt, a.reason) for a in (await handle.status()).errors] == [(1, "lease_expired")]
    assert scalar(ledger_dsn, "select count(*) from fault_ledger where job_id = %s", (handle,)) == 2
