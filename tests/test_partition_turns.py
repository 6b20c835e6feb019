"""Issue 28 (a), revision 0013: reserve_partitions locks a turn of one job by the id of the first job
the walk read (a primary-key probe instead of a probe of the partition's range), and counts a walk's
running jobs in one scan. The decisions must stay what they were: no partition over its limit with
many sessions reserving at once, a partition at its limit skipped, weights kept, a first job that is
no longer a candidate (locked elsewhere, or taken earlier in the same call) replaced by the next."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import psycopg
import pytest

from pgqueue import Client
from pgqueue.resources import sql_dir
from tests.test_partition_walk import _log_plans, reserve_concurrently
from tests.test_partitions import reserve
from tests.worker_jobs import Probe
from tests.worker_support import client

__all__ = ["client"]

SQL_FUNCTIONS = sql_dir() / "functions"


async def _dispatch(client: Client, queue: str, sizes: dict[str, int]) -> None:
    for partition, size in sizes.items():
        await client.dispatch_many([Probe(hook="never", n=i) for i in range(size)], queue=queue, partition=partition)


def _loops(plan: dict[str, Any], under_lock: bool = False) -> Counter[tuple[str, bool]]:
    """Executions of each jobs index scan in one logged plan, keyed by (index, below a LockRows node)."""
    found: Counter[tuple[str, bool]] = Counter()
    if plan.get("Relation Name") == "jobs" and "Index Name" in plan:
        found[(plan["Index Name"], under_lock)] += int(plan.get("Actual Loops", 0))
    for child in plan.get("Plans", []):
        found += _loops(child, under_lock or plan["Node Type"] == "LockRows")
    return found


async def test_turns_of_one_job_lock_the_walked_job_by_its_key_and_count_running_jobs_in_one_scan(
        client: Client, dsn: str) -> None:
    # 20 partitions of 3 jobs under a cap of 2, one of them running in every other partition: a
    # reservation of 20 walks 20 partitions and takes one job of each. Revision 0011 probed each
    # partition's range again to lock its job (20 scans of jobs_partition_idx below the lock) and
    # counted each one's running jobs with a probe of its own (20 scans of jobs_partition_running_idx).
    await _dispatch(client, "keyed", {f"k{n:02}": 3 for n in range(20)})
    await client.set_limits("keyed", per_partition_concurrency=2, fair=True)  # turns (0016: else due order)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("update pgqueue.jobs set token = nextval('pgqueue.lease_token_seq'), "
                     "available_at = clock_timestamp() + interval '1 hour' where id in ("
                     "select distinct on (partition) id from pgqueue.jobs where right(partition, 1) in "
                     "('0', '2', '4', '6', '8') order by partition, available_at, id)")
    logged: list[str] = []
    with psycopg.connect(dsn) as conn:
        _log_plans(conn, logged)
        granted = [r[0] for r in conn.execute(
            "select j.partition from pgqueue.reserve(array['keyed'], 20, 60) r join pgqueue.jobs j using (id)")]
        conn.rollback()
    assert sorted(granted) == [f"k{n:02}" for n in range(20)]
    turns = [json.loads(m[m.find("{"):])["Plan"] for m in logged if "{" in m and "locked as materialized" in m]
    assert turns
    loops = sum((_loops(plan) for plan in turns), Counter())
    assert loops[("jobs_pkey", True)] == 20
    assert loops[("jobs_partition_idx", True)] == 0
    assert loops[("jobs_partition_running_idx", False)] == len(turns)


async def test_a_partition_at_its_limit_is_skipped_and_the_others_are_served(client: Client, dsn: str) -> None:
    # A cap of 2 for every partition, 1 for p0 (its override): the first reservation takes one job
    # of each, the second one more of each but p0, the third finds every partition at its limit.
    await _dispatch(client, "caps", {f"p{n}": 3 for n in range(6)})
    await client.set_limits("caps", per_partition_concurrency=2, fair=True)  # turns (0016: else due order)
    await client.set_partition_limit("caps", "p0", concurrency=1)
    assert reserve(dsn, "caps", 6) == [f"p{n}" for n in range(6)]
    assert Counter(reserve(dsn, "caps", 6)) == {f"p{n}": 1 for n in range(1, 6)}
    assert reserve(dsn, "caps", 6) == []
    # One of p3's ends: p3 alone has room again.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pgqueue.ack(array_agg(id), array_agg(token)) from (select id, token from pgqueue.jobs "
                     "where partition = 'p3' and token is not null limit 1) done")
    assert reserve(dsn, "caps", 6) == ["p3"]


async def test_a_first_job_locked_elsewhere_gives_its_turn_to_the_next_job_of_its_partition(
        client: Client, dsn: str) -> None:
    await _dispatch(client, "skip", {"a": 3, "b": 3})
    await client.set_limits("skip", per_partition_concurrency=2, fair=True)  # turns (0016: else due order)
    with psycopg.connect(dsn) as other:
        # Another transaction holds a's first job (FOR UPDATE): SKIP LOCKED passes over it.
        held = other.execute("select id from pgqueue.jobs where partition = 'a' "
                             "order by available_at, ctid limit 1 for update").fetchone()
        assert held is not None
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("select r.id, j.partition from pgqueue.reserve(array['skip'], 2, 60) r "
                                "join pgqueue.jobs j using (id)").fetchall()
        other.rollback()
    assert Counter(partition for _, partition in rows) == {"a": 1, "b": 1}
    assert held[0] not in {job for job, _ in rows}


async def test_later_rounds_of_one_call_take_each_partitions_next_jobs_in_proportion_to_their_weights(
        client: Client, dsn: str) -> None:
    # capped (an override of 1), heavy (weight 1), vip (weight 3). A reservation of 1 takes capped's
    # turn. The next, of 9, goes on after it: heavy 1, vip 3; then rounds from the first, capped at its
    # limit: heavy 1, vip 3, and heavy 1 (the call is full; the cursor stays at heavy). The
    # later rounds' walks read as each partition's first job the one an earlier round of the same
    # call took: they take the next one.
    await _dispatch(client, "mixed", {"capped": 10, "heavy": 10, "vip": 10})
    await client.set_limits("mixed", fair=True)
    await client.set_partition_limit("mixed", "capped", concurrency=1)
    await client.set_partition_limit("mixed", "vip", weight=3)
    assert reserve(dsn, "mixed", 1) == ["capped"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select r.id, j.partition from pgqueue.reserve(array['mixed'], 9, 60) r "
                            "join pgqueue.jobs j using (id)").fetchall()
        cursor = conn.execute("select partition_cursor, partition_credit from pgqueue.queues "
                              "where name = 'mixed'").fetchone()
    assert [partition for _, partition in rows] == ["heavy", "vip", "vip", "vip", "heavy", "vip", "vip", "vip",
                                                    "heavy"]
    assert len({job for job, _ in rows}) == 9
    assert cursor == ("heavy", 0)


@pytest.mark.parametrize("limits", ["queue cap", "overrides only"])
async def test_many_concurrent_reservers_never_pass_a_limit_nor_share_a_job(
        client: Client, dsn: str, limits: str) -> None:
    # 8 sessions reserve from 80 partitions of mixed sizes at once, each acking what it got in its
    # next transaction. "queue cap": 2 for every partition, 1 and 3 for some (overrides);
    # "overrides only": fair shares with caps of 1 or 3 on some partitions, the others uncapped.
    sizes = {f"m{n:02}": (15 if n % 7 == 0 else 3) for n in range(80)}
    await _dispatch(client, "crowd", sizes)
    caps: dict[str, int | None] = {name: 2 if limits == "queue cap" else None for name in sizes}
    if limits == "queue cap":
        await client.set_limits("crowd", per_partition_concurrency=2)
    else:
        await client.set_limits("crowd", fair=True)
    for n, name in enumerate(sizes):
        if n % 5 == 0:
            caps[name] = 1 if n % 10 == 0 else 3
            await client.set_partition_limit("crowd", name, concurrency=caps[name], weight=1 + n % 3)
    granted, over = reserve_concurrently(
        dsn, "crowd", batch=9, sessions=8, rounds=400,
        over_cap=lambda partition, count: caps[partition] is not None and count > (caps[partition] or 0))
    assert not over
    ids = [job for jobs in granted for job, _ in jobs]
    assert len(ids) == len(set(ids))
    assert Counter(partition for jobs in granted for _, partition in jobs) == sizes


_CALL = ("select ids, doomed, cursor_at, credit, lost from {name}((select q from pgqueue.queues q where "
         "q.name = 'same'), 0::smallint, %s, %s, %s)")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_the_same_grants_as_revision_0011_in_the_same_states(client: Client, dsn: str, seed: int) -> None:
    """Revision 0011's reserve_partitions, installed beside the current one, decides the same in every
    state a random workload goes through: the same jobs in the same order, the same cursor and
    credit. Caps, overrides, weights, rates, running jobs and rows another session holds vary."""
    rng = random.Random(seed)
    names = [f"s{n:02}" for n in range(30)]
    await _dispatch(client, "same", {name: rng.choice([1, 2, 3, 6, 12]) for name in names})
    cap = rng.choice([None, 1, 2, 3])
    await client.set_limits("same", per_partition_concurrency=cap, fair=True,
                            per_partition_rate=rng.choice([None, "8/s"]))
    for name in rng.sample(names, 8):
        await client.set_partition_limit("same", name, concurrency=rng.choice([None, 1, 4]),
                                         weight=rng.choice([1, 2, 3]))
    previous = SQL_FUNCTIONS.joinpath("reserve_partitions", "0011.sql").read_text()
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as other:
        conn.execute(previous.replace("pgqueue.reserve_partitions(", "pgqueue.reserve_partitions_0011("))
        for _ in range(12):
            # Another session holds a few ready jobs (SKIP LOCKED passes over them in both).
            other.execute("select id from pgqueue.jobs where queue = 'same' and token is null "
                          "order by random() limit 3 for update")
            row = conn.execute("select clock_timestamp()").fetchone()
            assert row is not None
            now = row[0]
            take = rng.choice([1, 2, 5, 9, 17, 40])
            answers = []
            for name in ("pgqueue.reserve_partitions", "pgqueue.reserve_partitions_0011"):
                with conn.transaction(force_rollback=True):
                    answers.append(conn.execute(_CALL.format(name=name).encode(), (take, now, now)).fetchone())
            assert answers[0] == answers[1], (take, answers)
            # Move on: a real reservation, then some of the running jobs end.
            other.rollback()
            conn.execute("select * from pgqueue.reserve(array['same'], %s, 60)", (rng.choice([3, 8, 20]),))
            conn.execute("select pgqueue.ack(array_agg(id), array_agg(token)) from (select id, token from pgqueue.jobs "
                         "where queue = 'same' and token is not null order by random() limit %s) done",
                         (rng.choice([0, 2, 6]),))
        conn.execute("drop function pgqueue.reserve_partitions_0011(pgqueue.queues, smallint, integer, timestamptz, "
                     "timestamptz)")
