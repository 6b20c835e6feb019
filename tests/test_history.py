"""History (issue 15): pgqueue.job_stats written by the outcome functions themselves, the kept
completed jobs, their pruning, the Python API, and the ``--json`` of the reading commands."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgqueue import Client, JobContext, QueueConfigurationError
from pgqueue.worker import maintenance
from pgqueue.worker.maintenance import Maintenance
from tests.cli_support import cli_env, command, enqueue, pgqueue
from tests.helpers import envelope
from tests.worker_jobs import Once, Probe, Retrying
from tests.worker_support import client, finish, hooks

__all__ = ["client", "hooks"]


def totals(conn: psycopg.Connection[Any], name: str) -> dict[str, int]:
    """The outcome counts of one job name in pgqueue.job_stats (every minute and shard summed)."""
    row = conn.execute(
        "select coalesce(sum(succeeded), 0)::int, coalesce(sum(failed), 0)::int, coalesce(sum(retried), 0)::int,"
        " coalesce(sum(cancelled), 0)::int, coalesce(sum(duration_count), 0)::int,"
        " coalesce(sum(latency_count), 0)::int from pgqueue.job_stats where name = %s", (name,)).fetchone()
    assert row is not None
    return dict(zip(("succeeded", "failed", "retried", "cancelled", "timed", "latencies"), row, strict=True))


async def test_a_known_workload_through_a_real_worker_is_counted_exactly(
        client: Client, hooks: Any, conn: psycopg.Connection[Any]) -> None:
    async def ok(job: Probe, context: JobContext) -> None:
        return None

    async def fails_first(job: Probe, context: JobContext) -> None:
        if context.attempts == 1:
            raise RuntimeError("first attempt fails")

    async def bad(job: Probe, context: JobContext) -> None:
        raise ValueError("always")

    hooks("ok", ok)
    hooks("fails_first", fails_first)
    hooks("bad", bad)
    # N = 5 succeed, M = 3 succeed after one retry, K = 2 fail, 2 are cancelled before they run.
    await client.dispatch_many([Probe(hook="ok", n=i) for i in range(5)])
    await client.dispatch_many([Retrying(hook="fails_first", n=i) for i in range(3)])
    await client.dispatch_many([Once(hook="bad", n=i) for i in range(2)])
    cancelled = [await client.dispatch(Probe(hook="ok", n=100 + i), delay=3600) for i in range(2)]
    assert [await client.cancel(job_id) for job_id in cancelled] == ["cancelled", "cancelled"]

    worker = await client.worker(concurrency=2, listen=False, poll_interval=600)
    assert await finish(worker.run(max_jobs=13), "13 reservations") == 13
    await worker.completer.wait_idle()

    assert totals(conn, Probe.name) == {"succeeded": 5, "failed": 0, "retried": 0, "cancelled": 2,
                                        "timed": 5, "latencies": 5}
    assert totals(conn, Retrying.name) == {"succeeded": 3, "failed": 0, "retried": 3, "cancelled": 0,
                                           "timed": 6, "latencies": 6}
    assert totals(conn, Once.name) == {"succeeded": 0, "failed": 2, "retried": 0, "cancelled": 0,
                                       "timed": 2, "latencies": 2}
    bad_durations = conn.execute("select min(duration_max), min(latency_max) from pgqueue.job_stats").fetchone()
    assert bad_durations is not None and all(v is not None and v >= 0 for v in bad_durations)

    # The Python API: the same numbers, typed.
    rows = await client.history(queue="default")
    by_name: dict[str, list[int]] = {}
    for row in rows:
        sums = by_name.setdefault(row.name, [0, 0, 0, 0])
        for i, value in enumerate((row.succeeded, row.failed, row.retried, row.cancelled)):
            sums[i] += value
        assert row.duration_avg is None or row.duration_avg <= (row.duration_max or 0) + 1e-9
    assert by_name == {Probe.name: [5, 0, 0, 2], Retrying.name: [3, 0, 3, 0], Once.name: [0, 2, 0, 0]}
    assert await client.history(queue="elsewhere") == []
    assert await client.history(since=datetime.now(UTC) + timedelta(minutes=2)) == []
    [fifteen] = [t for t in await client.throughput((15,)) if t.queue == "default"]
    assert (fifteen.succeeded, fifteen.failed, fifteen.retried, fifteen.cancelled) == (8, 2, 3, 2)
    with pytest.raises(QueueConfigurationError, match="whole numbers of minutes"):
        await client.throughput((0,))
    with pytest.raises(QueueConfigurationError, match="timezone-aware"):
        await client.history(since=datetime(2026, 1, 1))  # naive on purpose


def test_the_old_calls_from_psql_keep_working_and_count(conn: psycopg.Connection[Any]) -> None:
    for _ in range(4):
        conn.execute("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope(name="tests:psql")),))
    granted = conn.execute("select id, token from pgqueue.reserve(array['default'], 4, 60)").fetchall()
    (a, ta), (b, tb), (c, tc), (d, td) = granted
    assert conn.execute("select * from pgqueue.ack(array[%s]::uuid[], array[%s]::bigint[])", (a, ta)).fetchall() \
        == [(a, True)]
    assert conn.execute("select pgqueue.release(%s, %s, 0)", (b, tb)).fetchone() == (True,)
    assert conn.execute("select pgqueue.release(%s, %s)", (b, tb)).fetchone() == (False,)  # token gone
    assert conn.execute("select pgqueue.fail(%s, %s, null, 'given up', null)", (c, tc)).fetchone() == (True,)
    assert conn.execute("select pgqueue.fail(%s, %s, null, 'x', null, 'exception')", (d, td + 1)).fetchone() \
        == (False,)
    # A stale ack changes nothing and counts nothing.
    assert conn.execute("select * from pgqueue.ack(array[%s]::uuid[], array[%s]::bigint[])", (d, td + 1)).fetchall() \
        == [(d, False)]
    assert totals(conn, "tests:psql") == {"succeeded": 1, "failed": 1, "retried": 1, "cancelled": 0,
                                          "timed": 0, "latencies": 0}
    # The new calls take the handler's run time and the wait before it started.
    assert conn.execute("select * from pgqueue.ack(array[%s]::uuid[], array[%s]::bigint[], array[0.5], "
                        "array[0.25], false)", (d, td)).fetchall() == [(d, True)]
    row = conn.execute("select sum(duration_sum), max(duration_max), sum(latency_count), min(latency_max) "
                       "from pgqueue.job_stats where name = 'tests:psql'").fetchone()
    assert row is not None and row[0] == 0.5 and row[1] == 0.5 and row[2] == 1 and row[3] >= 0.25
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="1 ids but 2 durations"):
        conn.execute("select * from pgqueue.ack(array[%s]::uuid[], array[1]::bigint[], array[1, 2]::float8[], "
                     "null, false)", (d,))
    # Reserve's doomed path: a job released on its last try is moved to failed_jobs, and counted.
    conn.execute("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("doomed", tries=1, name="tests:doomed")),))
    [(e, te)] = conn.execute("select id, token from pgqueue.reserve(array['doomed'], 1, 60)").fetchall()
    assert conn.execute("select pgqueue.release(%s, %s, 0)", (e, te)).fetchone() == (True,)
    assert conn.execute("select * from pgqueue.reserve(array['doomed'], 1, 60)").fetchall() == []
    assert conn.execute("select reason from pgqueue.failed_jobs where job_id = %s", (e,)).fetchone() \
        == ("attempts_exhausted",)
    assert totals(conn, "tests:doomed") == {"succeeded": 0, "failed": 1, "retried": 1, "cancelled": 0,
                                            "timed": 0, "latencies": 0}
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="outcome must be"):
        conn.execute("select pgqueue.record_outcomes('done', array['q'], array['n'], null, null)")


async def test_keep_completed_copies_acked_jobs_only_when_on(client: Client, hooks: Any,
                                                            conn: psycopg.Connection[Any]) -> None:
    async def ok(job: Probe, context: JobContext) -> None:
        return None

    hooks("ok", ok)
    await client.dispatch_many([Probe(hook="ok", n=i) for i in range(3)])
    worker = await client.worker(concurrency=2, listen=False, poll_interval=600)
    assert await finish(worker.run(stop_when_empty=True), "the default worker to drain") == 3
    assert conn.execute("select count(*) from pgqueue.completed_jobs").fetchone() == (0,)

    await client.dispatch_many([Probe(hook="ok", n=10 + i) for i in range(3)])
    keeping = await client.worker(concurrency=2, listen=False, poll_interval=600, keep_completed=3600)
    assert await finish(keeping.run(stop_when_empty=True), "the keeping worker to drain") == 3
    kept = conn.execute("select envelope->'args'->>'n', attempts, queue, duration >= 0, latency >= 0, "
                        "finished_at >= created_at from pgqueue.completed_jobs order by 1").fetchall()
    assert kept == [(str(10 + i), 1, "default", True, True, True) for i in range(3)]
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)
    with pytest.raises(QueueConfigurationError, match="keep_completed must be a finite number of seconds"):
        await client.worker(keep_completed=-1)


async def test_maintenance_prunes_expired_history_in_batches(client: Client, conn: psycopg.Connection[Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    conn.execute("insert into pgqueue.job_stats (minute, queue, name, shard, succeeded) "
                 "select date_trunc('minute', now()) - make_interval(days => 8, mins => i), 'q', 'old', 0, 1 "
                 "from generate_series(1, 7) i")
    conn.execute("insert into pgqueue.job_stats (minute, queue, name, shard, succeeded) "
                 "values (date_trunc('minute', now()) - interval '6 days', 'q', 'recent', 0, 1)")
    conn.execute("insert into pgqueue.completed_jobs (job_id, queue, envelope, attempts, created_at, finished_at) "
                 "select gen_random_uuid(), 'q', '{}', 1, now() - interval '3 hours', "
                 "now() - make_interval(hours => i) "
                 "from generate_series(0, 4) i")
    monkeypatch.setattr(maintenance, "PRUNE_BATCH", 2)
    store = await client._store(client.settings.connection(None))  # the worker's own door
    keep_forever = Maintenance(store, None, interval=1, grace=0)
    # Completed jobs are kept when this worker has no retention for them; history older than 7 days goes.
    assert await keep_forever.prune() == (7, 0)
    assert conn.execute("select array_agg(name) from pgqueue.job_stats").fetchone() == (["recent"],)
    two_hours = Maintenance(store, None, interval=1, grace=0, completed_retention=2 * 3600 - 60)
    assert await two_hours.prune() == (0, 3)
    assert conn.execute("select count(*) from pgqueue.completed_jobs").fetchone() == (2,)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="batch must be >= 1"):
        conn.execute("select * from pgqueue.prune_history(1, null, 0)")


CONCURRENT_ACKER = """
import sys, psycopg
dsn, rounds = sys.argv[1], int(sys.argv[2])
acked = 0
with psycopg.connect(dsn, autocommit=True) as conn:
    for _ in range(rounds):
        rows = conn.execute("select id, token from pgqueue.reserve(array['a', 'b'], 5, 60)").fetchall()
        if not rows:
            break
        ids, tokens = [r[0] for r in rows], [r[1] for r in rows]
        done = conn.execute("select count(*) from pgqueue.ack(%s::uuid[], %s::bigint[], %s::float8[], "
                            "%s::float8[], false) where acked", (ids, tokens, [0.001] * len(ids), [0.0] * len(ids)))
        acked += done.fetchone()[0]
print(acked)
"""


async def test_many_processes_acking_in_the_same_minute_count_exactly(dsn: str, conn: psycopg.Connection[Any]) -> None:
    # Two queues and three names: every ack batch upserts several rows, in key order, so processes
    # never wait on each other in opposite orders (a deadlock would fail a process).
    names = ["tests:x", "tests:y", "tests:z"]
    total = 0
    for i in range(300):
        conn.execute("select pgqueue.enqueue(%s, 0)", (Jsonb(envelope("ab"[i % 2], name=names[i % 3])),))
        total += 1
    processes = [await asyncio.create_subprocess_exec(sys.executable, "-c", CONCURRENT_ACKER, dsn, "1000",
                                                      stdout=asyncio.subprocess.PIPE,
                                                      stderr=asyncio.subprocess.PIPE) for _ in range(6)]
    # Generous: six interpreters start on a shared 2-core machine.
    outputs = [await finish(p.communicate(), "an acking process", within=300) for p in processes]
    for process, (_out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err.decode()
    acked = sum(int(out) for out, _ in outputs)
    assert acked == total
    row = conn.execute("select sum(succeeded)::int, sum(duration_count)::int, count(distinct (queue, name)) "
                       "from pgqueue.job_stats").fetchone()
    assert row == (total, total, 6)


def test_reading_commands_print_documented_json(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    enqueue(conn, "mail")
    enqueue(conn, "mail", delay=600)
    conn.execute("insert into pgqueue.job_stats (minute, queue, name, shard, succeeded, failed, retried, cancelled,"
                 " duration_count, duration_sum, duration_max) "
                 "values (date_trunc('minute', now()) - interval '2 minutes', 'mail', 'app:Send', 0, 4, 1, 2, 1,"
                 " 5, 2.5, 1.0)")
    conn.execute("select pgqueue.pause('mail')")
    status = pgqueue("queue:status", "--json", "--dsn", dsn, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert set(data) == {"queues", "workers_listening", "workflows"}
    assert data["workflows"] == {"waiting": 0, "delayed": 0, "running": 0, "sleeping": 0, "waiting_signal": 0,
                                 "waiting_child": 0, "capped": False}
    [mail] = data["queues"]
    assert mail == {"queue": "mail", "ready": 1, "delayed": 1, "blocked": 0, "reserved": 0, "expired": 0,
                    "failed": 0, "oldest_ready_age": mail["oldest_ready_age"], "paused": True, "concurrency": None,
                    "rate_limit": None, "rate_period": None, "per_partition_concurrency": None,
                    "per_partition_rate_limit": None, "per_partition_rate_period": None, "fair": False,
                    "adaptive_min": None, "adaptive_max": None, "adaptive_decrease": 0.9,
                    "per_partition_adaptive_min": None, "per_partition_adaptive_max": None, "aging_seconds": None,
                    # Two minutes ago: outside the last minute, inside the last 5 and 15.
                    "throughput": {"1": {"succeeded": 0, "failed": 0, "retried": 0, "cancelled": 0},
                                   **{w: {"succeeded": 4, "failed": 1, "retried": 2, "cancelled": 1}
                                      for w in ("5", "15")}}}
    text = pgqueue("queue:status", "--dsn", dsn, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    header, row = text.stdout.splitlines()[:2]
    assert header.split()[-6:] == ["DONE", "1M", "DONE", "5M", "DONE", "15M"]
    assert row.split()[-3:] == ["0", "5", "5"]

    # --watch --json: one document per line, until interrupted (a clean exit).
    watch = subprocess.Popen([*command(), "queue:status", "--watch", "--json", "--interval", "0.2", "--dsn", dsn],
                             cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None
        documents = [json.loads(watch.stdout.readline()) for _ in range(2)]
        assert [d["queues"][0]["queue"] for d in documents] == ["mail", "mail"]
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()

    history = pgqueue("queue:history", "--json", "--queue", "mail", "--dsn", dsn, cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    [minute] = json.loads(history.stdout)
    assert {k: minute[k] for k in ("queue", "name", "succeeded", "failed", "retried", "cancelled",
                                   "duration_avg", "duration_max", "latency_avg")} == {
        "queue": "mail", "name": "app:Send", "succeeded": 4, "failed": 1, "retried": 2, "cancelled": 1,
        "duration_avg": 0.5, "duration_max": 1.0, "latency_avg": None}
    assert datetime.fromisoformat(minute["minute"]).second == 0

    embedded = pgqueue("embedded", "status", "--json", cwd=tmp_path,
                       env={"PGQUEUE_EMBEDDED_DIR": str(tmp_path / "no-server")})
    assert embedded.returncode == 3
    assert json.loads(embedded.stdout) == {"running": False, "pid": None,
                                           "data_dir": str(tmp_path / "no-server"), "dsn": None}
