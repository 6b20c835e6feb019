"""Issue 28, revision 0011: reserve_partitions walks the next partitions by one ordered scan of
jobs_partition_idx first (the next 2k entries for k partitions, at most 128) and probes one partition at a time
only past it. The order served is the same as the walk by probes: these tests pin it where the
scan ends inside a heavy partition, and that partitions of few jobs cost no probe each."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg

from pgqueue import Client
from tests.test_partitions import reserve
from tests.worker_jobs import Probe
from tests.worker_support import client

__all__ = ["client"]


async def _dispatch(client: Client, queue: str, sizes: dict[str, int]) -> None:
    for partition, size in sizes.items():
        await client.dispatch_many([Probe(hook="never", n=i) for i in range(size)], queue=queue, partition=partition)


async def test_a_walk_past_a_heavy_partition_goes_on_by_probes_in_name_order(client: Client, dsn: str) -> None:
    # reserve(8) walks 8 partitions: its scan of 16 entries ends inside "b" (a, then 15 of b's 30),
    # and the probes go on after b: c, d, e, f, g (heavy too), h.
    await _dispatch(client, "walk", {"a": 1, "b": 30, "c": 1, "d": 1, "e": 1, "f": 1, "g": 30, "h": 1})
    await client.set_limits("walk", fair=True)
    assert reserve(dsn, "walk", 8) == ["a", "b", "c", "d", "e", "f", "g", "h"]
    # Only b and g are left: the next round from the first shares the 8 between them at once.
    assert Counter(reserve(dsn, "walk", 8)) == {"b": 4, "g": 4}
    # A reservation smaller than the partitions left: one each, in order, from after the cursor.
    assert reserve(dsn, "walk", 1) == ["b"]
    assert reserve(dsn, "walk", 1) == ["g"]


async def test_a_walk_with_limits_skips_full_partitions_and_keeps_their_order(client: Client, dsn: str) -> None:
    # Capped at 1 running each: the first reservation takes one of each of 12 partitions (the scan
    # reads 24 entries of partitions holding 3 each: 8 partitions, then 4 probes).
    await _dispatch(client, "capped", {f"p{n:02}": 3 for n in range(12)})
    await client.set_limits("capped", per_partition_concurrency=1)
    assert reserve(dsn, "capped", 12) == [f"p{n:02}" for n in range(12)]
    # All at their cap: nothing more, however far the walk goes.
    assert reserve(dsn, "capped", 12) == []


def _probes(plan: dict[str, Any], under_lock: bool = False) -> int:
    """Executions of jobs_partition_idx scans outside a LockRows node (the walk's) in one logged plan."""
    loops = 0
    if not under_lock and plan.get("Index Name") == "jobs_partition_idx":
        loops += int(plan.get("Actual Loops", 0))
    for child in plan.get("Plans", []):
        loops += _probes(child, under_lock or plan["Node Type"] == "LockRows")
    return loops


def _log_plans(conn: psycopg.Connection[Any], logged: list[str]) -> None:
    """Have ``conn`` log the analyzed JSON plan of every statement, nested ones too, into ``logged``."""
    conn.add_notice_handler(
        lambda d: logged.append(d.message_primary or "") if d.severity_nonlocalized == "LOG" else None)
    conn.execute("load 'auto_explain'")
    for setting, value in [("auto_explain.log_min_duration", "0"), ("auto_explain.log_nested_statements", "on"),
                           ("auto_explain.log_analyze", "on"), ("auto_explain.log_timing", "off"),
                           ("auto_explain.log_format", "json"), ("client_min_messages", "log")]:
        conn.execute("select set_config(%s, %s, false)", (setting, value))


async def test_partitions_of_few_jobs_are_walked_without_a_probe_each(client: Client, dsn: str) -> None:
    # 40 partitions of 2 jobs: a reservation of 20 walks 20 of them. Probing each (revision 0010)
    # scanned jobs_partition_idx 20 times; the ordered scan reads them in one (plus the probe of
    # the first partition after the cursor, none the first time).
    await _dispatch(client, "few", {f"t{n:02}": 2 for n in range(40)})
    await client.set_limits("few", fair=True)
    logged: list[str] = []
    with psycopg.connect(dsn) as conn:
        _log_plans(conn, logged)
        granted = [r[0] for r in conn.execute(
            "select j.partition from pgqueue.reserve(array['few'], 20, 60) r join pgqueue.jobs j using (id)")]
        conn.rollback()
    assert sorted(granted) == [f"t{n:02}" for n in range(20)]
    walks = [json.loads(m[m.find("{"):])["Plan"] for m in logged if "{" in m and "with recursive" in m]
    assert walks
    assert sum(_probes(plan) for plan in walks) <= 2 * len(walks)


async def test_concurrent_reservations_of_a_walked_queue_never_share_a_job_or_pass_a_cap(
        client: Client, dsn: str) -> None:
    # 4 connections reserve from 60 partitions (mixed sizes: the scan ends in heavy ones) capped at 2;
    # every job is granted once, and no partition has more than 2 jobs reserved at a time.
    sizes = {f"m{n:02}": (12 if n % 5 == 0 else 2) for n in range(60)}
    await _dispatch(client, "many", sizes)
    await client.set_limits("many", per_partition_concurrency=2)
    granted, over = reserve_concurrently(dsn, "many", batch=7, sessions=4, rounds=500,
                                         over_cap=lambda partition, count: count > 2)
    assert not over
    ids = [job for jobs in granted for job, _ in jobs]
    assert len(ids) == len(set(ids))
    assert Counter(partition for jobs in granted for _, partition in jobs) == sizes


Grants = list[list[tuple[str, str]]]


def reserve_concurrently(dsn: str, queue: str, *, batch: int, sessions: int, rounds: int,
                         over_cap: Callable[[str, int], bool]) -> tuple[Grants, list[dict[str, int]]]:
    """``sessions`` connections reserve ``batch`` jobs of ``queue`` at a time at once, each acking what it
    got in its next transaction, until the queue is empty (``rounds`` at most): per session the (job id,
    partition) pairs granted, and each count of reserved jobs per partition ``over_cap`` found over."""
    granted: Grants = [[] for _ in range(sessions)]
    over: list[dict[str, int]] = []
    barrier = threading.Barrier(sessions)
    ack = "select pgqueue.ack(array_agg(id), array_agg(token)) from pgqueue.jobs where id = any(%s::uuid[])"

    def reserver(n: int) -> None:
        held: list[str] = []  # reserved last time: acked in the next transaction, before reserving again
        with psycopg.connect(dsn, autocommit=True) as conn:
            barrier.wait()
            for _ in range(rounds):
                with conn.transaction():
                    if held:
                        conn.execute(ack, (held,))
                    rows = conn.execute(
                        "select r.id::text, j.partition from pgqueue.reserve(array[%s], %s, 60) r "
                        "join pgqueue.jobs j using (id)", (queue, batch)).fetchall()
                    running: dict[str, int] = dict(conn.execute(
                        "select partition, count(*)::integer from pgqueue.jobs where queue = %s "
                        "and token is not null and available_at > clock_timestamp() group by partition",
                        (queue,)).fetchall())
                    if any(over_cap(p, count) for p, count in running.items()):
                        over.append(running)
                    left = conn.execute("select count(*) from pgqueue.jobs where queue = %s", (queue,)).fetchone()
                granted[n] += [(row[0], row[1]) for row in rows]
                held = [row[0] for row in rows]
                if left is not None and left[0] == len(held) and not rows:
                    break
            if held:
                conn.execute(ack, (held,))

    threads = [threading.Thread(target=reserver, args=(n,)) for n in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return granted, over


def _loops_under(plan: dict[str, Any], relation: str, inside: bool = False) -> int:
    """Executions of the jobs scans below the node writing ``relation`` in one logged plan."""
    inside = inside or plan.get("Relation Name") == relation
    loops = int(plan.get("Actual Loops", 0)) if inside and plan.get("Relation Name") == "jobs" else 0
    return loops + sum(_loops_under(child, relation, inside) for child in plan.get("Plans", []))


async def test_a_partitioned_reservation_probes_granted_jobs_for_lost_leases_only_when_one_was_lost(
        client: Client, dsn: str) -> None:
    # Revision 0011: reserve_partitions says whether a candidate's lease expired unended (issue 26
    # records that attempt), so a grant without one no longer looks every job up again by id.
    await _dispatch(client, "lost", {f"t{n:02}": 2 for n in range(10)})
    await client.set_limits("lost", fair=True)
    logged: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        _log_plans(conn, logged)
        first = conn.execute("select id from pgqueue.reserve(array['lost'], 5, 60)").fetchall()
        # Revision 0015: the lost attempts' insert is a statement of its own, run only when there are some.
        statements = [json.loads(m[m.find("{"):]) for m in logged if "{" in m]
        assert len(first) == 5 and any("granted as" in s["Query Text"] for s in statements)
        assert not [s for s in statements if "insert into pgqueue.attempt_failures" in s["Query Text"]]
        # Their leases expire unended (moved into the past): the next reservation records those attempts.
        conn.execute("update pgqueue.jobs set available_at = clock_timestamp() - interval '1 second' "
                     "where id = any(%s)", ([r[0] for r in first],))
        logged.clear()
        again = {r[0] for r in conn.execute("select id from pgqueue.reserve(array['lost'], 20, 60)").fetchall()}
        assert {r[0] for r in first} <= again
        inserts = [json.loads(m[m.find("{"):])["Plan"] for m in logged
                   if "{" in m and "insert into pgqueue.attempt_failures" in m]
        assert inserts and sum(_loops_under(plan, "attempt_failures") for plan in inserts) >= 1
        recorded = conn.execute("select count(*) from pgqueue.attempt_failures where reason = 'lease_expired' "
                                "and job_id = any(%s)", ([r[0] for r in first],)).fetchone()
        assert recorded is not None and recorded[0] == 5


async def test_a_walk_longer_than_the_scan_reads_goes_on_by_probes(client: Client, dsn: str) -> None:
    # reserve(100) walks 100 partitions of 2 jobs: the scan reads its 128 entries at most (64
    # partitions), the other 36 are probed; one job each, in name order.
    await _dispatch(client, "long", {f"l{n:03}": 2 for n in range(100)})
    await client.set_limits("long", fair=True)
    assert reserve(dsn, "long", 100) == [f"l{n:03}" for n in range(100)]
    assert reserve(dsn, "long", 100) == [f"l{n:03}" for n in range(100)]
    assert reserve(dsn, "long", 1) == []
