"""Issue 28, revision 0016: a queue with per-partition limits and no fair shares is served in due
order, each partition within its limits (one ordered read of the oldest ready jobs), and the round
robin walk takes only what that read leaves: one partition's backlog at its limit at the head of the
queue never holds the others back. Fair shares (``fair``, or a partition with a weight) keep the
turns."""

from __future__ import annotations

import json
from collections import Counter

import psycopg

from pgqueue import Client
from tests.test_partition_turns import _loops
from tests.test_partition_walk import _log_plans, reserve_concurrently
from tests.test_partitions import granted, reserve
from tests.worker_jobs import Probe
from tests.worker_support import client

__all__ = ["client"]


async def _dispatch(client: Client, queue: str, *blocks: tuple[str | None, int]) -> None:
    """Each block (partition, jobs) in its own call, in order: a later block is due later."""
    for n, (partition, size) in enumerate(blocks):
        await client.dispatch_many([Probe(hook="never", n=n * 1000 + i) for i in range(size)], queue=queue,
                                   partition=partition)


async def test_limits_without_fair_shares_serve_the_queue_in_due_order(client: Client, dsn: str) -> None:
    # Round robin would give a 2 and b 2; due order gives a what its limit allows first.
    await _dispatch(client, "due", ("a", 5), ("b", 5))
    await client.set_limits("due", per_partition_concurrency=3)
    assert granted(dsn, "due", 4) == {"a": 3, "b": 1}
    assert granted(dsn, "due", 10) == {"b": 2}  # a at its limit, b up to its own
    assert granted(dsn, "due", 10) == {}


async def test_jobs_without_a_partition_take_their_place_in_due_order(client: Client, dsn: str) -> None:
    # Served by partition in turns, jobs without one came after the round; in due order they are
    # what they are: the oldest.
    await _dispatch(client, "mixed", (None, 3), ("a", 3))
    await client.set_limits("mixed", per_partition_concurrency=2)
    assert granted(dsn, "mixed", 3) == {None: 3}
    assert granted(dsn, "mixed", 3) == {"a": 2}


async def test_a_backlog_at_its_limit_at_the_head_does_not_hold_the_others_back(client: Client, dsn: str) -> None:
    # 300 jobs of heavy, due first, capped at 2: the ordered read (10 + 100 jobs) sees heavy's only;
    # the walk then serves the light partitions after it in the same call.
    await _dispatch(client, "head", ("heavy", 300), *((f"light{n}", 2) for n in range(5)))
    await client.set_limits("head", per_partition_concurrency=2)
    first = granted(dsn, "head", 10)
    assert first["heavy"] == 2
    assert sum(first.values()) == 10 and all(first[f"light{n}"] <= 2 for n in range(5))
    second = granted(dsn, "head", 10)
    assert "heavy" not in second and sum(second.values()) == 2
    assert first + second == {"heavy": 2, **{f"light{n}": 2 for n in range(5)}}
    assert granted(dsn, "head", 10) == {}


async def test_fair_shares_or_a_weight_keep_the_turns(client: Client, dsn: str) -> None:
    await _dispatch(client, "turns", ("a", 5), ("b", 5))
    await client.set_limits("turns", per_partition_concurrency=3, fair=True)
    assert granted(dsn, "turns", 4) == {"a": 2, "b": 2}
    await _dispatch(client, "weighted", ("a", 5), ("b", 5))
    await client.set_limits("weighted", per_partition_concurrency=3)
    await client.set_partition_limit("weighted", "b", weight=2)  # a weight is a fair share: turns
    assert granted(dsn, "weighted", 3) == {"a": 1, "b": 2}


async def test_a_job_locked_elsewhere_is_passed_over_and_the_call_still_fills(client: Client, dsn: str) -> None:
    await _dispatch(client, "held", ("a", 3), ("b", 3))
    await client.set_limits("held", per_partition_concurrency=2)
    with psycopg.connect(dsn) as other:
        held = other.execute("select id from pgqueue.jobs where partition = 'a' "
                             "order by available_at, ctid limit 1 for update").fetchone()
        assert held is not None
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("select r.id, j.partition from pgqueue.reserve(array['held'], 4, 60) r "
                                "join pgqueue.jobs j using (id)").fetchall()
        other.rollback()
    assert held[0] not in {job for job, _ in rows}
    assert Counter(partition for _, partition in rows) == {"a": 2, "b": 2}  # a's third took its place


async def test_a_reservation_in_due_order_reads_no_partition_index_and_locks_in_one_ordered_scan(
        client: Client, dsn: str) -> None:
    # 40 partitions of 3 jobs, dispatched a job of each at a time (as tenants' jobs arrive), capped
    # at 2: a reservation of 40 takes the oldest 40, one of each partition, with no walk and no
    # turn (revision 0013 walked 40 partitions: scans of jobs_partition_idx, one per turn of one job).
    for n in range(3):
        for p in range(40):
            await client.dispatch(Probe(hook="never", n=n), queue="flat", partition=f"t{p:02}")
    await client.set_limits("flat", per_partition_concurrency=2)
    logged: list[str] = []
    with psycopg.connect(dsn) as conn:
        _log_plans(conn, logged)
        got = [r[0] for r in conn.execute(
            "select j.partition from pgqueue.reserve(array['flat'], 40, 60) r join pgqueue.jobs j using (id)")]
        conn.commit()
    assert sorted(got) == [f"t{p:02}" for p in range(40)]
    plans = [json.loads(m[m.find("{"):])["Plan"] for m in logged if "{" in m]
    loops = sum((_loops(plan) for plan in plans), Counter())
    assert not any(index == "jobs_partition_idx" for index, _ in loops)
    assert loops[("jobs_reservation_idx", True)] == 1  # read and locked in due order, in one scan
    # The limits hold from there on: one more of each partition, then none.
    assert Counter(reserve(dsn, "flat", 100)) == {f"t{p:02}": 1 for p in range(40)}
    assert reserve(dsn, "flat", 100) == []


async def test_a_lost_lease_in_due_order_is_granted_again_recorded_and_not_counted_running(
        client: Client, dsn: str) -> None:
    # Capped at 1: a's first job is granted, its lease expires unended (its worker died). The next
    # reservation grants it again (an expired lease does not count as running), records the lost
    # attempt (issue 26), and takes no second job of a.
    await _dispatch(client, "lost", ("a", 2), ("b", 1))
    await client.set_limits("lost", per_partition_concurrency=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = conn.execute("select id from pgqueue.reserve(array['lost'], 1, 60)").fetchall()
        assert len(first) == 1
        conn.execute("update pgqueue.jobs set available_at = clock_timestamp() - interval '1 second' "
                     "where id = %s", (first[0][0],))
        again = conn.execute("select r.id, j.partition, r.attempts from pgqueue.reserve(array['lost'], 10, 60) r "
                             "join pgqueue.jobs j using (id)").fetchall()
        assert sorted((partition, attempts) for _, partition, attempts in again) == [("a", 2), ("b", 1)]
        assert first[0][0] in {job for job, _, _ in again}
        recorded = conn.execute("select count(*) from pgqueue.attempt_failures where reason = 'lease_expired' "
                                "and job_id = %s", (first[0][0],)).fetchone()
        assert recorded == (1,)


async def test_concurrent_reservations_in_due_order_never_share_a_job_or_pass_a_cap(client: Client, dsn: str) -> None:
    # 4 connections reserve 7 at a time: a heavy partition due first (its 150 jobs fill every read,
    # so the walk takes the rest), then 40 light ones with jobs of none between them; capped at 2.
    await _dispatch(client, "crowd", ("heavy", 150), *((f"c{n:02}", 3) for n in range(20)), (None, 10),
                    *((f"d{n:02}", 3) for n in range(20)))
    await client.set_limits("crowd", per_partition_concurrency=2)
    granted, over = reserve_concurrently(dsn, "crowd", batch=7, sessions=4, rounds=500,
                                         over_cap=lambda partition, count: partition is not None and count > 2)
    assert not over
    ids = [job for jobs in granted for job, _ in jobs]
    assert len(ids) == len(set(ids)) == 150 + 40 * 3 + 10
