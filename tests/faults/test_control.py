"""Issue 14 with several worker processes: a global concurrency limit and a rate limit hold
across all of them (checked from a ledger kept by the database), and effects written through
context.transaction() are committed exactly once under kill -9."""

from __future__ import annotations

import os
import random
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import Client
from tests.faults.fault_jobs import EffectJob, SpanJob
from tests.faults.harness import FaultReport, WorkerFleet, dispatch, scalar, wait_until
from tests.faults.ledger import check_ledger

SPANS_DDL = """
create table fault_spans (n integer not null, event text not null, at timestamptz not null default clock_timestamp());
create table fault_grants (job_id uuid not null, at timestamptz not null);
-- Every grant of a reservation, at the reservation's own clock (reserved_at).
create function fault_note_grant() returns trigger language plpgsql as $$
begin
    insert into public.fault_grants (job_id, at) values (new.id, new.reserved_at);
    return null;
end $$;
create trigger fault_note_grant after update of token on pgqueue.jobs for each row
    when (new.token is not null and new.token is distinct from old.token)
    execute function fault_note_grant();
"""
EFFECTS_DDL = "create table fault_effects (job_id uuid not null, n integer not null, token bigint not null)"
EFFECT_JOBS = int(os.environ.get("PGQUEUE_FAULT_EFFECT_JOBS", "5000"))
SEED = int(os.environ.get("PGQUEUE_FAULT_SEED", "7"))


def _execute(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement.encode())


def _rows(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement.encode()).fetchall()


def most_at_once(events: list[tuple[datetime, str]]) -> int:
    """The most handlers running at one moment, from (time, 'start' | 'end') events."""
    running = peak = 0
    # At equal times an end comes first: a handler that ends as another starts is not overlap.
    for _, event in sorted(events, key=lambda e: (e[0], e[1] == "start")):
        running += 1 if event == "start" else -1
        peak = max(peak, running)
    return peak


async def test_four_workers_of_concurrency_10_never_run_more_than_the_limit_of_3(
        ledger_dsn: str, producer: Client, fleet: WorkerFleet, fault_pyproject: Path,
        fault_report: FaultReport) -> None:
    _execute(ledger_dsn, SPANS_DDL)
    await producer.set_limits("limited", concurrency=3)
    jobs = 60
    ids = await producer.dispatch_many([SpanJob(n=i, work=0.05) for i in range(jobs)], queue="limited")
    assert len(ids) == jobs
    workers = [fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=10, queues="limited")
               for _ in range(4)]
    await wait_until(lambda: int(scalar(ledger_dsn, "select count(*) from pgqueue.jobs")) == 0, within=120,
                     what="the limited queue is drained", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0, 0], fleet.logs()[-3000:]
    events = [(at, event) for at, event in _rows(ledger_dsn, "select at, event from fault_spans")]
    assert len(events) == 2 * jobs
    peak = most_at_once(events)
    assert 1 < peak <= 3
    fault_report.rows.append({"fault": "4 workers x concurrency 10, queue limit 3", "injected": 0,
                              "dispatched": jobs, "completed": jobs, "failed": 0, "lost": 0, "duplicate_acks": 0,
                              "stale_acks": 0, "reruns": 0, "most_running_at_once": peak})


async def test_a_rate_limit_of_20_per_second_holds_within_one_token_over_10_seconds(
        ledger_dsn: str, producer: Client, fleet: WorkerFleet, fault_pyproject: Path) -> None:
    _execute(ledger_dsn, SPANS_DDL)
    await producer.set_limits("metered", rate_limit=20, rate_period=1)
    await producer.dispatch_many([SpanJob(n=i) for i in range(300)], queue="metered")
    workers = [fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=10, queues="metered")
               for _ in range(4)]
    await wait_until(lambda: int(scalar(ledger_dsn, "select count(*) from fault_grants")) >= 230, within=60,
                     what="11.5 s of reservations at 20/s", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0, 0], fleet.logs()[-3000:]
    times = sorted(float(t) for (t,) in _rows(ledger_dsn,
                                              "select extract(epoch from at)::float8 from fault_grants"))
    # Every window of 10 s that starts at a reservation holds at most 20 * 10 + 1 of them.
    worst = max(sum(1 for t in times[i:] if t < start + 10.0) for i, start in enumerate(times))
    assert worst <= 201
    # And the limit is a limit, not a stall: the workers keep close to the rate.
    first_10s = sum(1 for t in times if t < times[0] + 10.0)
    assert first_10s >= 150
    print(f"rate 20/s: most reservations in any 10 s window {worst} (limit 201); first 10 s: {first_10s}")


@pytest.mark.slow
async def test_kill_9_with_effects_through_context_transaction_commits_each_effect_exactly_once(
        ledger_dsn: str, producer: Client, fleet: WorkerFleet, fault_pyproject: Path,
        fault_report: FaultReport) -> None:
    _execute(ledger_dsn, EFFECTS_DDL)
    rng = random.Random(SEED)
    workers = [fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=20) for _ in range(3)]
    await dispatch(producer, [EffectJob(n=i, work=0.002) for i in range(EFFECT_JOBS)])
    kills = 5
    thresholds = sorted(rng.sample(range(EFFECT_JOBS // 20, EFFECT_JOBS * 9 // 10), kills))
    for threshold in thresholds:
        await wait_until(lambda t=threshold: int(scalar(ledger_dsn, "select count(*) from fault_ledger")) >= t,
                         within=120, what=f"{threshold} executions", fleet=fleet)
        victim = rng.choice([w for w in workers if w.alive()])
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        victim.start()
    await wait_until(lambda: int(scalar(ledger_dsn, "select count(*) from pgqueue.jobs")) == 0, within=120,
                     what="the backlog is done", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0], fleet.logs()[-3000:]

    report = check_ledger(ledger_dsn)
    assert report.completed == EFFECT_JOBS and report.failed == 0
    effects = int(scalar(ledger_dsn, "select count(*) from fault_effects"))
    distinct = int(scalar(ledger_dsn, "select count(distinct n) from fault_effects"))
    # Executions ran more than once (killed mid-run, lease expired), yet each effect committed once.
    assert report.executions > EFFECT_JOBS
    assert (effects, distinct) == (EFFECT_JOBS, EFFECT_JOBS)
    fault_report.add("kill -9 x5, effects through context.transaction()", kills, report,
                     effects=effects, duplicate_effects=effects - distinct)
