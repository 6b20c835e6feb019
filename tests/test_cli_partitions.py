"""Issue 28 from the command line: queue:limit's per-partition limits and overrides, and
queue:status --partitions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.cli_support import one_error_line, pgqueue, pgqueue_all
from tests.helpers import envelope

Conn = psycopg.Connection[Any]


def test_per_partition_limits_and_an_override_from_the_command_line(dsn: str, conn: Conn, tmp_path: Path) -> None:
    for n in range(5):
        conn.execute("select pgqueue.enqueue(%s)", (Jsonb(envelope("orders") | {"partition": f"tenant:{n % 2}"}),))
    limited, override = pgqueue_all(
        ("queue:limit", "orders", "--per-partition-concurrency", "2", "--per-partition-rate", "10/s", "--dsn", dsn),
        ("queue:limit", "orders", "--partition", "tenant:big", "--concurrency", "20", "--weight", "3", "--dsn", dsn),
        cwd=tmp_path)
    assert limited.returncode == 0, limited.stderr
    assert "per partition of queue 'orders': concurrency 2, rate 10/s, burst 10" in limited.stdout
    assert "partition 'tenant:big' of queue 'orders': override concurrency 20, weight 3" in override.stdout
    # A limit not given keeps its value; the queue's own limits are apart.
    queue_wide = pgqueue("queue:limit", "orders", "--concurrency", "50", "--dsn", dsn, cwd=tmp_path)
    assert "limits of queue 'orders': concurrency 50" in queue_wide.stdout
    assert "per partition of queue 'orders': concurrency 2, rate 10/s, burst 10" in queue_wide.stdout
    assert conn.execute("select count(*) from pgqueue.reserve(array['orders'], 10, 60)").fetchone() == (4,)

    status, as_json = pgqueue_all(("queue:status", "--partitions", "--dsn", dsn),
                                  ("queue:status", "--partitions", "--queue", "orders", "--json", "--dsn", dsn),
                                  cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    lines = {line.split()[0]: line.split() for line in status.stdout.splitlines() if line.startswith("tenant:")}
    assert lines["tenant:0"][:6] == ["tenant:0", "2", "1", "0", "2", "10/s"]
    assert lines["tenant:big"][1:] == ["0", "0", "0", "20", "10/s", "3", "yes"]
    assert "per partition of queue 'orders': concurrency 2, rate 10/s, burst 10" in pgqueue(
        "queue:status", "--dsn", dsn, cwd=tmp_path).stdout
    rows = {r["partition"]: r for r in json.loads(as_json.stdout)["orders"]}
    assert (rows["tenant:1"]["running"], rows["tenant:1"]["waiting"], rows["tenant:1"]["concurrency"]) == (2, 0, 2)

    bad_rate, bad_partition, mixed, cleared = pgqueue_all(
        ("queue:limit", "orders", "--per-partition-rate", "often", "--dsn", dsn),
        ("queue:limit", "orders", "--partition", "a\x07b", "--concurrency", "1", "--dsn", dsn),
        ("queue:limit", "orders", "--partition", "x", "--per-partition-concurrency", "1", "--dsn", dsn),
        ("queue:limit", "orders", "--clear", "--dsn", dsn), cwd=tmp_path)
    assert bad_rate.returncode == 2 and "'often' is not a rate" in one_error_line(bad_rate.stderr)
    assert bad_partition.returncode == 2
    assert r"partition 'a\u0007b' is not valid" in one_error_line(bad_partition.stderr)
    assert mixed.returncode == 2 and "--partition sets one partition's override" in one_error_line(mixed.stderr)
    assert "limits of queue 'orders': none" in cleared.stdout and "per partition" not in cleared.stdout
    assert conn.execute("select partitioned from pgqueue.queues").fetchone() == (True,)  # the override stays


def test_per_partition_options_keep_an_adaptive_limit(dsn: str, conn: Conn, tmp_path: Path) -> None:
    # One after the other: the second must find the first's bounds (pgqueue_all runs side by side).
    adaptive = pgqueue("queue:limit", "orders", "--concurrency", "5", "--adaptive", "2:8", "--dsn", dsn, cwd=tmp_path)
    per_partition = pgqueue("queue:limit", "orders", "--per-partition-concurrency", "2", "--dsn", dsn, cwd=tmp_path)
    assert adaptive.returncode == 0, adaptive.stderr
    assert per_partition.returncode == 0, per_partition.stderr
    assert conn.execute("select concurrency, adaptive_min, adaptive_max, partition_concurrency from pgqueue.queues"
                        " where name = 'orders'").fetchone() == (5, 2, 8, 2)
    # Revision 0010: with --partition, --adaptive gives that partition its own bounds (refused before).
    own = pgqueue("queue:limit", "orders", "--partition", "a", "--adaptive", "2:8", "--dsn", dsn, cwd=tmp_path)
    assert own.returncode == 0, own.stderr
    assert conn.execute("select concurrency, adaptive_min, adaptive_max from pgqueue.partitions"
                        " where partition = 'a'").fetchone() == (2, 2, 8)
    assert conn.execute("select concurrency, adaptive_min from pgqueue.queues").fetchone() == (5, 2)


def test_adaptive_partitions_and_the_cut_from_the_command_line(dsn: str, conn: Conn, tmp_path: Path) -> None:
    """Revision 0010: --per-partition-adaptive, --partition NAME --adaptive and --adaptive-decrease."""
    for n in range(3):
        conn.execute("select pgqueue.enqueue(%s)", (Jsonb(envelope("api") | {"partition": f"tenant:{n}"}),))
    # One after the other: the second keeps what the first set.
    every = pgqueue("queue:limit", "api", "--per-partition-concurrency", "4", "--per-partition-adaptive", "2:20",
                    "--dsn", dsn, cwd=tmp_path)
    cut = pgqueue("queue:limit", "api", "--adaptive-decrease", "0.5", "--dsn", dsn, cwd=tmp_path)
    assert every.returncode == 0, every.stderr
    assert "per partition of queue 'api': concurrency adaptive 2:20 (each starts at 4)" in every.stdout
    assert "per partition of queue 'api': concurrency adaptive 2:20 (each starts at 4, cut x0.5)" in cut.stdout
    one = pgqueue("queue:limit", "api", "--partition", "tenant:0", "--adaptive", "3:30", "--dsn", dsn, cwd=tmp_path)
    assert "partition 'tenant:0' of queue 'api': override adaptive 3:30" in one.stdout
    # Another per-partition option keeps the bounds and the factor.
    kept = pgqueue("queue:limit", "api", "--per-partition-rate", "5/s", "--dsn", dsn, cwd=tmp_path)
    assert "concurrency adaptive 2:20 (each starts at 4, cut x0.5), rate 5/s" in kept.stdout
    status, as_json = pgqueue_all(("queue:status", "--partitions", "--queue", "api", "--dsn", dsn),
                                  ("queue:status", "--partitions", "--queue", "api", "--json", "--dsn", dsn),
                                  cwd=tmp_path)
    lines = {line.split()[0]: line for line in status.stdout.splitlines() if line.startswith("tenant:")}
    assert "4 (adaptive 3:30)" in lines["tenant:0"] and "4 (adaptive 2:20)" in lines["tenant:1"]
    rows = {r["partition"]: r for r in json.loads(as_json.stdout)["api"]}
    assert (rows["tenant:1"]["adaptive_min"], rows["tenant:1"]["adaptive_max"]) == (2, 20)
    bad_bounds, bad_factor, mixed, off = pgqueue_all(
        ("queue:limit", "api", "--per-partition-adaptive", "9:2", "--dsn", dsn),
        ("queue:limit", "api", "--adaptive-decrease", "1.5", "--dsn", dsn),
        ("queue:limit", "api", "--partition", "tenant:0", "--adaptive-decrease", "0.5", "--dsn", dsn),
        ("queue:limit", "api", "--per-partition-adaptive", "off", "--dsn", dsn), cwd=tmp_path)
    assert bad_bounds.returncode == 2 and "--per-partition-adaptive" in one_error_line(bad_bounds.stderr)
    assert bad_factor.returncode == 2 and "above 0 and below 1" in one_error_line(bad_factor.stderr)
    assert mixed.returncode == 2 and "not with --partition" in one_error_line(mixed.stderr)
    assert "per partition of queue 'api': concurrency 4, rate 5/s" in off.stdout
    assert conn.execute("select partition_adaptive_min, adaptive_decrease from pgqueue.queues").fetchone() \
        == (None, 0.5)
