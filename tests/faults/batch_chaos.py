"""A batch under chaos (issue 26 §2): ``members`` members finishing on ``workers`` worker processes
while one of them is killed with SIGKILL again and again (every ``kill_every`` seconds, or at given
fractions of the members ended), then restarted. The batch's callback must be released exactly once
(a trigger records every move of its ``available_at`` off ``pgqueue.never()``), be acked once, read
the final counts, and every member must have ended exactly once (one ack or one failure record).

The suite runs it at a size that takes well under a minute (tests/faults/test_batches.py); the
full size of the issue (100,000 members, 4 workers, a kill every 3 s) runs on demand::

    PGQUEUE_BATCH_CHAOS_MEMBERS=100000 PGQUEUE_BATCH_CHAOS_KILL_EVERY=3 \\
        uv run --group test pytest -q -s tests/faults/test_batches.py -k full_size
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import Batch, Client, Job
from tests.faults.fault_jobs import AlwaysFailsJob, BatchCallbackJob, LedgerJob
from tests.faults.harness import WorkerFleet, WorkerProcess, scalar, wait_until
from tests.faults.ledger import LedgerReport, check_ledger

# Every release of a waiting job (its available_at leaving pgqueue.never()), by whichever statement.
RELEASES = """
create table if not exists fault_releases (
    job_id uuid        not null,
    at     timestamptz not null default clock_timestamp()
);
create or replace function fault_note_release() returns trigger language plpgsql
set search_path from current as $$
begin
    insert into fault_releases (job_id) values (new.id);
    return null;
end $$;
drop trigger if exists fault_releases on pgqueue.jobs;
create trigger fault_releases after update of available_at on pgqueue.jobs
    for each row when (old.available_at >= '9999-01-01 00:00:00+00' and new.available_at < '9999-01-01 00:00:00+00')
    execute function fault_note_release();
"""


@dataclass
class ChaosFigures:
    """What one run measured (the report's row)."""

    members: int
    workers: int
    kills: int
    seconds: float
    dispatch_seconds: float
    callback_releases: int
    callback_runs: int
    callback_acks: int
    members_not_ended_once: int
    reruns: int
    succeeded: int
    failed: int
    cancelled: int

    def as_row(self) -> dict[str, Any]:
        """As a dict (the fault report's extra columns)."""
        return asdict(self)


async def dispatch_batch(producer: Client, members: int, failing: int, cancelled: int) -> Batch:
    """A batch of ``members``: ``failing`` fail terminally, ``cancelled`` are cancelled before any
    worker starts; the callback records the counts it reads."""
    jobs: list[Job] = [LedgerJob(n=i) for i in range(members - failing)]
    jobs += [AlwaysFailsJob(n=i) for i in range(failing)]
    batch = await producer.batch(jobs, then=BatchCallbackJob())
    for member in batch.members[:cancelled]:
        assert await producer.cancel(member) == "cancelled"
    return batch


def _ended(conn: psycopg.Connection[Any], batch: Batch) -> tuple[int, int]:
    """(members ended, callback acks) now."""
    row = conn.execute(b"select (select total - pending from pgqueue.batches where id = %s),"
                       b" (select count(*) from fault_acks where job_id = %s and kind = 'ack')",
                       (batch.id, batch.callback)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def run_batch_chaos(dsn: str, fleet: WorkerFleet, pyproject: Path, producer: Client, *,  # noqa: PLR0913  # the run's settings
                          members: int, workers: int = 4, failing: int = 40, cancelled: int = 60,
                          kill_every: float | None = None, kill_at: Sequence[float] = (),
                          within: float = 600.0) -> tuple[ChaosFigures, LedgerReport]:
    """Run one batch to its callback under SIGKILLs (every ``kill_every`` seconds, and/or once the
    fractions ``kill_at`` of the members have ended); check it; return the figures and the ledger's
    verdict."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RELEASES.encode())
    began = time.monotonic()
    batch = await dispatch_batch(producer, members, failing, cancelled)
    dispatched = time.monotonic() - began
    fleet_workers = [fleet.start(dsn, pyproject=pyproject, concurrency=20) for _ in range(workers)]
    started = time.monotonic()
    kills = 0
    thresholds = sorted(int(f * members) for f in kill_at)
    next_time = None if kill_every is None else started + kill_every
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            ended, acks = _ended(conn, batch)
            if acks:
                break
            now = time.monotonic()
            if now - started > within:
                raise AssertionError(f"the batch of {members} did not release and run its callback within "
                                     f"{within:.0f}s ({ended} members ended, {kills} kills)\n{fleet.logs()[-4000:]}")
            due = next_time is not None and now >= next_time
            if thresholds and ended >= thresholds[0]:
                thresholds.pop(0)
                due = True
            if due:
                _kill_and_restart(fleet_workers[kills % workers])
                kills += 1
                if next_time is not None:
                    next_time = time.monotonic() + kill_every  # type: ignore[operator]
            await asyncio.sleep(0.1)  # a poll of the database's state, as wait_until does
    seconds = time.monotonic() - started
    # A worker restarted by the last kill may still be starting, before its signal handlers are in
    # place: stop each only once it has registered (pgqueue.workers, written when its run begins).
    pids = [w.pid for w in fleet_workers]
    await wait_until(lambda: scalar(dsn, "select count(distinct pid) from pgqueue.workers where pid = any(%s)",
                                    (pids,)) == len(pids), within=60, what="every worker registered", fleet=fleet)
    for worker in fleet_workers:
        worker.signal(signal.SIGTERM)
    codes = [w.wait(60) for w in fleet_workers]
    assert codes == [0] * workers, f"exit codes {codes}\n{fleet.logs()[-3000:]}"
    return _checked(dsn, batch, members=members, workers=workers, failing=failing, cancelled=cancelled,
                    kills=kills, seconds=seconds, dispatched=dispatched)


def _kill_and_restart(victim: WorkerProcess) -> None:
    victim.signal(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    victim.start()


def _checked(dsn: str, batch: Batch, *, members: int, workers: int, failing: int, cancelled: int,  # noqa: PLR0913  # the run's settings and measures
             kills: int, seconds: float, dispatched: float) -> tuple[ChaosFigures, LedgerReport]:
    """Check the run (AssertionError naming what is wrong) and return its figures."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        def one(statement: str, *params: Any) -> Any:
            row = conn.execute(statement.encode(), params).fetchone()
            assert row is not None
            return row[0]

        counts = one("select row(pending, succeeded, failed, cancelled)::text from pgqueue.batches where id = %s",
                     batch.id)
        # Every member ended exactly once: one ack of a reservation, or one failure record (a
        # cancelled member's delete has no token; a failed one's is a 'fail').
        not_once = one("with acks as (select job_id, count(*) as n from fault_acks"
                       "              where kind = 'ack' and token is not null group by job_id),"
                       " fails as (select job_id, count(*) as n from pgqueue.failed_jobs group by job_id)"
                       " select count(*) from pgqueue.batch_members m"
                       " left join acks a on a.job_id = m.job_id left join fails f on f.job_id = m.job_id"
                       " where m.batch_id = %s and (m.outcome is null or coalesce(a.n, 0) + coalesce(f.n, 0) <> 1)",
                       batch.id)
        figures = ChaosFigures(
            members=members, workers=workers, kills=kills, seconds=round(seconds, 1),
            dispatch_seconds=round(dispatched, 2),
            callback_releases=one("select count(*) from fault_releases where job_id = %s", batch.callback),
            callback_runs=one("select count(*) from fault_ledger where job_id = %s", batch.callback),
            callback_acks=one("select count(*) from fault_acks where job_id = %s and kind = 'ack'", batch.callback),
            members_not_ended_once=not_once,
            reruns=one("select count(*) - count(distinct job_id) from fault_ledger"),
            succeeded=members - failing - cancelled, failed=failing, cancelled=cancelled)
        seen = one("select data::text from fault_echo where job_id = %s and text = 'batch' limit 1", batch.callback)
        left = one("select count(*) from pgqueue.jobs")
        marked = one("with m as (update fault_acks a set kind = 'fail' from pgqueue.failed_jobs f"
                     " where f.job_id = a.job_id and f.reason = 'cancelled' and a.token is null returning 1)"
                     " select count(*) from m")
    assert counts == f"(0,{members - failing - cancelled},{failing},{cancelled})", counts
    assert (figures.callback_releases, figures.callback_acks) == (1, 1), figures
    assert figures.callback_runs >= 1 and not_once == 0 and left == 0, figures
    assert seen == (f'{{"total": {members}, "failed": {failing}, "pending": 0, "cancelled": {cancelled}, '
                    f'"succeeded": {members - failing - cancelled}}}'), seen
    # pgqueue.cancel deletes before it records the failure: the ledger took those deletes for acks.
    assert marked == cancelled
    return figures, check_ledger(dsn)  # no job lost, none acked twice, no stale ack
