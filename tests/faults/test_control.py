"""Issue 14 with several worker processes: a global concurrency limit and a rate limit hold
across all of them (checked from a ledger kept by the database), and effects written through
context.transaction() are committed exactly once under kill -9 and PostgreSQL restarts."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqueue import Client
from pgqueue.embedded import EmbeddedPostgres
from tests.faults.fault_jobs import EffectJob, PressedSpanJob, SpanJob
from tests.faults.harness import FaultReport, WorkerFleet, dispatch, fault_settings, scalar, wait_until, write_pyproject
from tests.faults.ledger import check_ledger, install_ledger

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
RESTART_JOBS = int(os.environ.get("PGQUEUE_FAULT_RESTART_JOBS", "1000"))
# Each restart of the test's own server, in turn: fast shutdown (sessions disconnected, a
# checkpoint) and immediate shutdown (a crash: the next start runs crash recovery).
RESTART_MODES = ("fast", "immediate", "fast", "immediate")
RESTART_APP = "fault_restart_worker"
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


# issue 28: every grant, with the queue's live reservations and its limit once the reservation's
# statement is done (an AFTER trigger: it sees the whole batch). reserve holds the queue's row, so
# neither another reservation nor a backpressure cut can change either between its count and this.
ADAPTIVE_DDL = """
create table fault_pressed (n integer primary key);
create table fault_limit_grants (job_id uuid not null, reserved bigint not null, lim integer);
create function fault_note_limit() returns trigger language plpgsql as $$
begin
    insert into public.fault_limit_grants (job_id, reserved, lim)
    select new.id,
           (select count(*) from pgqueue.jobs j
            where j.queue = new.queue and j.token is not null and j.available_at > clock_timestamp()),
           (select q.concurrency from pgqueue.queues q where q.name = new.queue);
    return null;
end $$;
create trigger fault_note_limit after update of token on pgqueue.jobs for each row
    when (new.token is not null and new.token is distinct from old.token)
    execute function fault_note_limit();
"""


async def test_three_workers_never_reserve_beyond_the_adaptive_limit_as_backpressure_moves_it(
        ledger_dsn: str, producer: Client, fleet: WorkerFleet, fault_pyproject: Path,
        fault_report: FaultReport) -> None:
    _execute(ledger_dsn, SPANS_DDL + ADAPTIVE_DDL)
    await producer.set_limits("adaptive", concurrency=8, adaptive=(2, 8))
    jobs = 240
    ids = await producer.dispatch_many([PressedSpanJob(n=i, work=0.02, press=6) for i in range(jobs)],
                                       queue="adaptive")
    assert len(ids) == jobs
    workers = [fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=10, queues="adaptive")
               for _ in range(3)]
    await wait_until(lambda: int(scalar(ledger_dsn, "select count(*) from pgqueue.jobs")) == 0, within=180,
                     what="the adaptive queue is drained", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0], fleet.logs()[-3000:]
    pressed = int(scalar(ledger_dsn, "select count(*) from fault_pressed"))
    assert pressed == jobs // 6
    failures = _rows(ledger_dsn, "select reason, exception, left(message, 300) from pgqueue.failed_jobs")
    assert failures == [], fleet.logs()[-3000:]  # tries = 1: none spent
    grants = _rows(ledger_dsn, "select reserved, lim from fault_limit_grants")
    assert len(grants) == jobs + pressed
    over = [(reserved, lim) for reserved, lim in grants if reserved > lim]
    assert over == [], over[:10]
    limits = {lim for _, lim in grants}
    assert min(limits) >= 2 and max(limits) <= 8 and len(limits) > 2  # it moved, within its bounds
    events = [(at, event) for at, event in _rows(ledger_dsn, "select at, event from fault_spans")]
    peak = most_at_once(events)
    assert peak <= 8
    fault_report.rows.append({"fault": "3 workers x concurrency 10, adaptive limit 2..8, backpressure 1 in 6",
                              "injected": pressed, "dispatched": jobs, "completed": jobs, "failed": 0, "lost": 0,
                              "duplicate_acks": 0, "stale_acks": 0, "reruns": pressed,
                              "most_running_at_once": peak})


# issue 28, revision 0010: every grant of a partitioned job, with its partition's live reservations
# and limit once the statement is done, and when that partition's limit was last cut. reserve holds
# the queue's row, so no other reservation changes the count; a backpressure cut of the partition
# (which writes pgqueue.partitions, not the queue's row) may land between reserve's decision and
# this trigger: such a grant was decided under the limit before that cut.
PARTITION_DDL = """
create table fault_pressed (n integer primary key);
create table fault_partition_grants (job_id uuid not null, partition text not null, reserved bigint not null,
                                     lim integer, reserved_at timestamptz, cut_at timestamptz);
create function fault_note_partition() returns trigger language plpgsql as $$
begin
    insert into public.fault_partition_grants (job_id, partition, reserved, lim, reserved_at, cut_at)
    select new.id, new.partition,
           (select count(*) from pgqueue.jobs j
            where j.queue = new.queue and j.partition = new.partition and j.token is not null
              and j.available_at > clock_timestamp()),
           (select coalesce(p.concurrency, q.partition_concurrency) from pgqueue.queues q
            left join pgqueue.partitions p on p.queue = q.name and p.partition = new.partition
            where q.name = new.queue),
           new.reserved_at,
           (select p.adaptive_cut_at from pgqueue.partitions p
            where p.queue = new.queue and p.partition = new.partition);
    return null;
end $$;
create trigger fault_note_partition after update of token on pgqueue.jobs for each row
    when (new.token is not null and new.token is distinct from old.token)
    execute function fault_note_partition();
"""


async def test_three_workers_keep_each_partition_within_its_adaptive_limit(
        ledger_dsn: str, producer: Client, fleet: WorkerFleet, fault_pyproject: Path,
        fault_report: FaultReport) -> None:
    _execute(ledger_dsn, SPANS_DDL + PARTITION_DDL)
    await producer.set_limits("tenants", per_partition_concurrency=6, per_partition_adaptive=(2, 6))
    jobs = 240
    for tenant in range(3):
        await producer.dispatch_many([PressedSpanJob(n=i, work=0.02, press=6) for i in range(tenant, jobs, 3)],
                                     queue="tenants", partition=f"tenant:{tenant}")
    workers = [fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=10, queues="tenants")
               for _ in range(3)]
    await wait_until(lambda: int(scalar(ledger_dsn, "select count(*) from pgqueue.jobs")) == 0, within=180,
                     what="the partitioned queue is drained", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0], fleet.logs()[-3000:]
    pressed = int(scalar(ledger_dsn, "select count(*) from fault_pressed"))
    assert pressed == jobs // 6
    failures = _rows(ledger_dsn, "select reason, exception, left(message, 300) from pgqueue.failed_jobs")
    assert failures == [], fleet.logs()[-3000:]  # tries = 1: none spent
    grants = _rows(ledger_dsn, "select partition, reserved, lim, reserved_at, cut_at from fault_partition_grants")
    assert len(grants) == jobs + pressed
    assert max(reserved for _, reserved, *_ in grants) <= 6  # never above the bound, whatever raced
    decided = [(p, reserved, lim) for p, reserved, lim, at, cut in grants if cut is None or cut <= at]
    over = [g for g in decided if g[1] > g[2]]
    assert over == [], over[:10]
    assert len(decided) > len(grants) // 2
    limits = {lim for _, _, lim, *_ in grants}
    assert min(limits) >= 2 and max(limits) <= 6 and len(limits) > 2  # they moved, within the bounds
    # The queue's own limit never moved: the partitions' backpressure cut the partitions.
    assert scalar(ledger_dsn, "select concurrency from pgqueue.queues where name = 'tenants'") is None
    fault_report.rows.append({"fault": "3 workers x concurrency 10, 3 partitions adaptive 2..6, backpressure 1 in 6",
                              "injected": pressed, "dispatched": jobs, "completed": jobs, "failed": 0, "lost": 0,
                              "duplicate_acks": 0, "stale_acks": 0, "reruns": pressed,
                              "most_running_at_once": max(reserved for _, reserved, *_ in grants)})


async def test_a_rate_limit_of_20_per_second_holds_within_its_burst_over_10_seconds(
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
    # Every window of 10 s that starts at a reservation holds at most rate * 10 s + burst of them
    # (the burst defaults to the rate per period: 20).
    worst = max(sum(1 for t in times[i:] if t < start + 10.0) for i, start in enumerate(times))
    assert worst <= 20 * 10 + 20
    # And the limit is a limit, not a stall: the workers keep close to the rate.
    first_10s = sum(1 for t in times if t < times[0] + 10.0)
    assert first_10s >= 150
    print(f"rate 20/s burst 20: most reservations in any 10 s window {worst} (limit 220); first 10 s: {first_10s}")


async def test_four_workers_keep_every_partition_within_its_concurrency_and_rate(
        ledger_dsn: str, producer: Client, fleet: WorkerFleet, fault_pyproject: Path,
        fault_report: FaultReport) -> None:
    """Issue 28: per-partition limits are decided in reserve, so they hold across worker processes:
    no partition ever runs more than its limit at once (an override included), and no partition
    is granted more than rate * T + burst reservations in any window of T seconds."""
    _execute(ledger_dsn, SPANS_DDL)
    _execute(ledger_dsn, "create table fault_partitions (n integer primary key, partition text not null)")
    await producer.set_limits("tenants", per_partition_concurrency=2, per_partition_rate="10/s")
    await producer.set_partition_limit("tenants", "tenant:big", concurrency=4, rate="20/s")
    limits = {"tenant:big": 4} | {f"tenant:{t}": 2 for t in range(4)}
    per_partition = 25
    partition_of: dict[Any, str] = {}
    for k, partition in enumerate(limits):
        numbers = range(k * per_partition, (k + 1) * per_partition)
        handles = await producer.dispatch_many([SpanJob(n=n, work=0.05) for n in numbers], queue="tenants",
                                               partition=partition)
        partition_of.update(dict.fromkeys(handles, partition))
        _execute(ledger_dsn, "insert into fault_partitions select n, '" + partition + "' from generate_series("
                 f"{numbers[0]}, {numbers[-1]}) n")
    jobs = per_partition * len(limits)
    workers = [fleet.start(ledger_dsn, pyproject=fault_pyproject, concurrency=10, queues="tenants")
               for _ in range(4)]
    await wait_until(lambda: int(scalar(ledger_dsn, "select count(*) from pgqueue.jobs")) == 0, within=120,
                     what="the partitioned queue is drained", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0, 0], fleet.logs()[-3000:]
    spans = _rows(ledger_dsn, "select p.partition, s.at, s.event from fault_spans s join fault_partitions p using (n)")
    assert len(spans) == 2 * jobs
    peaks = {partition: most_at_once([(at, event) for p, at, event in spans if p == partition])
             for partition in limits}
    assert all(peaks[p] <= limits[p] for p in limits), peaks
    assert peaks["tenant:big"] > 2  # its override, not the queue's 2
    # Rates: in every window of T seconds that starts at a grant, at most rate * T + burst grants.
    rates = {"tenant:big": 20} | {f"tenant:{t}": 10 for t in range(4)}
    times: dict[str, list[float]] = {p: [] for p in limits}
    for job_id, at in _rows(ledger_dsn, "select job_id, extract(epoch from at)::float8 from fault_grants"):
        times[partition_of[job_id]].append(float(at))
    for partition, seen in times.items():
        seen.sort()
        assert len(seen) == per_partition
        for i, start in enumerate(seen):
            for j in range(i, len(seen)):
                assert j - i + 1 <= rates[partition] * (seen[j] - start) + rates[partition] + 1e-6, (partition, seen)
    print(f"4 workers x concurrency 10, per-partition limits {limits}: most running at once {peaks}")
    fault_report.rows.append({"fault": "4 workers x concurrency 10, per-partition limit 2 (override 4)",
                              "injected": 0, "dispatched": jobs, "completed": jobs, "failed": 0, "lost": 0,
                              "duplicate_acks": 0, "stale_acks": 0, "reruns": 0,
                              "most_running_at_once": max(peaks.values())})


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


@pytest.fixture
async def owned_effects_dsn(owned_server: EmbeddedPostgres) -> AsyncIterator[str]:
    """The owned server's migrated database ``app`` with the ledger and fault_effects, committing
    durably: an immediate shutdown is a crash, and a crash loses the commits whose WAL was not
    flushed yet (synchronous_commit=off) — exactly-once is a promise about committed work."""
    dsn = owned_server.dsn("app")
    install_ledger(dsn)
    _execute(dsn, EFFECTS_DDL)
    _execute(dsn, "alter database app set synchronous_commit = on")
    yield dsn


@pytest.mark.slow
async def test_postgres_restarts_mid_run_with_effects_through_context_transaction_commit_each_effect_once(
        owned_server: EmbeddedPostgres, owned_effects_dsn: str, fleet: WorkerFleet, tmp_path: Path,
        fault_report: FaultReport) -> None:
    dsn, total = owned_effects_dsn, RESTART_JOBS
    # A job's time limit of 3 s (not 1 s): on the shared machine, a commit right after a restart
    # can take a second; a 6 s lease still brings back the jobs of a crash within seconds.
    (tmp_path / "restart").mkdir()
    fault_pyproject = write_pyproject(tmp_path / "restart", {"lease": 6, "lease_margin": 2, "timeout": 3})
    worker_dsn = make_conninfo(dsn, application_name=RESTART_APP)
    workers = [fleet.start(worker_dsn, ledger_dsn=dsn, pyproject=fault_pyproject, concurrency=10)
               for _ in range(2)]
    producer = Client(settings=fault_settings(dsn, fault_pyproject))
    try:
        await producer.open()
        await dispatch(producer, [EffectJob(n=i) for i in range(total)])
    finally:
        await producer.close()

    def effects() -> int:
        return int(scalar(dsn, "select count(*) from fault_effects"))

    def remaining() -> int:
        return int(scalar(dsn, "select count(*) from pgqueue.jobs"))

    for number, mode in enumerate(RESTART_MODES, start=1):
        threshold = total * number // (len(RESTART_MODES) + 1)
        await wait_until(lambda t=threshold: effects() >= t, within=60,
                         what=f"{threshold} effects before restart {number}", fleet=fleet)
        # pg_ctl stop -m <mode>, then start (waiting until it accepts connections).
        await asyncio.to_thread(owned_server.restart, mode)
    await wait_until(lambda: remaining() == 0, within=90, what="the backlog is done after the restarts", fleet=fleet)
    # Nobody helped the workers: the same processes reconnected after every restart, and LISTEN again.
    assert all(w.alive() for w in workers), fleet.logs()[-3000:]
    await wait_until(lambda: int(scalar(dsn, "select count(*) from pg_stat_activity where application_name = %s "
                                             "and query ilike '%%listen pgqueue%%'", (RESTART_APP,))) == 2,
                     within=30, what="both workers LISTEN again", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0], fleet.logs()[-3000:]

    # Every job acknowledged or in failed_jobs with its reason (none lost), and the effect of
    # every acknowledged job committed exactly once, although executions were cut by the restarts.
    report = check_ledger(dsn)
    assert report.lost == 0 and report.completed + report.failed == total
    count, distinct = effects(), int(scalar(dsn, "select count(distinct n) from fault_effects"))
    acked_without_effect = int(scalar(dsn, "select count(*) from fault_acks a where a.kind = 'ack' and not exists "
                                           "(select 1 from fault_effects e where e.job_id = a.job_id)"))
    assert (count, distinct, acked_without_effect) == (report.completed, report.completed, 0)
    run_again = int(scalar(dsn, "select count(*) from (select job_id from fault_ledger group by job_id "
                                "having count(*) > 1) twice"))
    print(f"{len(RESTART_MODES)} restarts ({', '.join(RESTART_MODES)}): {total} jobs, {report.completed} acked, "
          f"{report.failed} failed {report.failure_reasons}, {report.executions} executions, "
          f"{run_again} jobs run more than once, {count - distinct} duplicate effects")
    fault_report.add(f"PostgreSQL restarts x{len(RESTART_MODES)} (fast, immediate), effects through "
                     "context.transaction()", len(RESTART_MODES), report, effects=count,
                     duplicate_effects=count - distinct, jobs_run_again=run_again)
