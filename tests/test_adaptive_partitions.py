"""Adaptive limits per partition and the configurable cut (issue 28, revision 0010): backpressure from
a job of an adaptive partition cuts that partition's limit (not the queue's), a window of its acks
grows it by one, within its bounds (the queue's for every partition, or a named partition's own);
a cut leaves floor(limit x the queue's adaptive_decrease), at least one less, never below the
minimum, once per overload. Decided in pgqueue.backpressure and pgqueue.ack; visible in
pgqueue.partitions and pgqueue.partition_status."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import errors

from pgqueue import Client, QueueConfigurationError, parse_decrease
from tests.api_support import client
from tests.helpers import envelope
from tests.sql_calls import ack, enqueue_many, reserve, rows, scalar

__all__ = ["client"]

Conn = psycopg.Connection[tuple[Any, ...]]
QUEUE = "tenants"


def dispatch(conn: Conn, partition: str, count: int) -> None:
    """``count`` ready jobs of ``partition`` in queue ``tenants``."""
    enqueue_many(conn, [envelope(QUEUE) | {"partition": partition} for _ in range(count)])


def grants_of(conn: Conn, partition: str, count: int) -> list[dict[str, Any]]:
    """Reserve up to ``count`` jobs of the queue; those of ``partition``."""
    granted = reserve(conn, [QUEUE], count)
    ids = [g["id"] for g in granted]
    mine = {r["id"] for r in rows(conn, "select id from pgqueue.jobs where id = any(%s) and partition = %s",
                                  (ids, partition))}
    return [g for g in granted if g["id"] in mine]


def limit_of(conn: Conn, partition: str) -> int | None:
    """The partition's row's concurrency (its adaptive limit's current value); None: no row or none."""
    found = rows(conn, "select concurrency from pgqueue.partitions where queue = %s and partition = %s",
                 (QUEUE, partition))
    return found[0]["concurrency"] if found else None


def queue_limit(conn: Conn) -> int | None:
    value: int | None = scalar(conn, "select concurrency from pgqueue.queues where name = %s", (QUEUE,))
    return value


def backpressure(conn: Conn, grant: dict[str, Any]) -> str:
    outcome: str = scalar(conn, "select pgqueue.backpressure(%s, %s, 0)", (grant["id"], grant["token"]))
    return outcome


def adaptive_partitions(conn: Conn, low: int | None, high: int | None, *, start: int | None = None,
                        partition: str | None = None) -> None:
    """Bounds for every partition of the queue (or one), starting at ``start``."""
    if start is not None:
        conn.execute(b"select pgqueue.set_partition_limits(%s, %s, null, null)", (QUEUE, start))
    conn.execute(b"select pgqueue.set_partition_adaptive_limit(%s, %s, %s, %s)", (QUEUE, partition, low, high))


def test_backpressure_cuts_the_partition_not_the_queue_once_per_overload(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_limits(%s, 30, null, null)", (QUEUE,))
    conn.execute(b"select pgqueue.set_adaptive_limit(%s, 2, 30)", (QUEUE,))
    adaptive_partitions(conn, 2, 20, start=20)
    dispatch(conn, "a", 25)
    dispatch(conn, "b", 5)
    first = grants_of(conn, "a", 30)
    assert len(first) == 20  # the partition's limit, not the queue's 30
    assert backpressure(conn, first[0]) == "backpressured"
    assert limit_of(conn, "a") == 18  # floor(20 x 0.9), the default factor
    assert queue_limit(conn) == 30  # the queue's own adaptive limit is left alone
    # The others were reserved before that cut: the same overload, not cut again.
    for grant in first[1:8]:
        assert backpressure(conn, grant) == "backpressured"
    assert limit_of(conn, "a") == 18
    assert limit_of(conn, "b") is None  # b still stands where every partition starts (20)
    [row] = rows(conn, "select * from pgqueue.partition_status(%s) where partition = 'a'", (QUEUE,))
    assert (row["concurrency"], row["adaptive_min"], row["adaptive_max"], row["overridden"]) == (18, 2, 20, False)


def test_a_cut_is_at_least_one_never_below_min_and_the_factor_is_configurable(conn: Conn) -> None:
    adaptive_partitions(conn, 3, 40, start=5)
    seen = []
    for _ in range(4):
        dispatch(conn, "a", 1)
        [grant] = grants_of(conn, "a", 1)
        backpressure(conn, grant)
        seen.append(limit_of(conn, "a"))
        time.sleep(0.001)  # the next job is reserved after this cut (clock_timestamp), a new overload
        conn.execute(b"delete from pgqueue.jobs where queue = %s", (QUEUE,))
    assert seen == [4, 3, 3, 3]  # floor(5 x 0.9) = 4 is one less; never below min 3
    conn.execute(b"select pgqueue.set_adaptive_decrease(%s, 0.5)", (QUEUE,))
    conn.execute(b"select pgqueue.set_partition_limit(%s, 'a', 40, null, null)", (QUEUE,))
    adaptive_partitions(conn, 3, 40, partition="a")  # its own bounds, starting at its 40
    dispatch(conn, "a", 1)
    [grant] = grants_of(conn, "a", 1)
    backpressure(conn, grant)
    assert limit_of(conn, "a") == 20  # halved, as revision 0009 did


def test_a_window_of_acks_grows_a_partition_by_one_never_above_max(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_limits(%s, 100, null, null)", (QUEUE,))  # a queue row, not adaptive
    adaptive_partitions(conn, 2, 4, start=2)
    dispatch(conn, "a", 60)
    seen = []
    for _ in range(8):
        grants = grants_of(conn, "a", 10)
        assert len(grants) == (limit_of(conn, "a") or 2)  # never more than the partition's limit
        before = scalar(conn, "select xmin::text from pgqueue.queues where name = %s", (QUEUE,))
        ack(conn, [g["id"] for g in grants], [g["token"] for g in grants])
        # The partition's window lives in its row: the ack did not write the queue's row.
        assert scalar(conn, "select xmin::text from pgqueue.queues where name = %s", (QUEUE,)) == before
        seen.append(limit_of(conn, "a"))
    assert seen[:3] == [3, 4, 4]  # one step per whole window, held at max
    assert max(v or 0 for v in seen) == 4


def test_an_override_wins_over_the_queue_bounds_and_its_own_bounds_over_both(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_limits(%s, 10, null, null)", (QUEUE,))
    conn.execute(b"select pgqueue.set_adaptive_limit(%s, 1, 10)", (QUEUE,))
    adaptive_partitions(conn, 2, 20, start=10)
    conn.execute(b"select pgqueue.set_partition_limit(%s, 'fixed', 6, null, null)", (QUEUE,))
    adaptive_partitions(conn, 5, 50, partition="own")
    dispatch(conn, "fixed", 2)
    [grant] = grants_of(conn, "fixed", 1)
    backpressure(conn, grant)
    assert limit_of(conn, "fixed") == 6  # a fixed override does not move ...
    assert queue_limit(conn) == 9  # ... its backpressure cuts the queue's adaptive limit instead
    assert limit_of(conn, "own") == 10  # the queue's per-partition start, within its own 5..50
    dispatch(conn, "own", 1)
    [grant] = grants_of(conn, "own", 3)  # due order: fixed's two (one backpressured), then own's
    backpressure(conn, grant)
    assert limit_of(conn, "own") == 9
    status = {r["partition"]: r for r in rows(conn, "select * from pgqueue.partition_status(%s)", (QUEUE,))}
    assert (status["own"]["adaptive_min"], status["own"]["adaptive_max"], status["own"]["overridden"]) == (5, 50, True)
    assert (status["fixed"]["adaptive_min"], status["fixed"]["concurrency"]) == (None, 6)
    # Its own bounds off: back to the queue's (clamped), and off for the queue: the per-partition value.
    adaptive_partitions(conn, None, None, partition="own")
    assert limit_of(conn, "own") == 9
    adaptive_partitions(conn, None, None)
    assert limit_of(conn, "own") is None
    assert scalar(conn, "select partition_adaptive from pgqueue.queues where name = %s", (QUEUE,)) is False
    # A weight alone keeps an adaptive partition's current limit.
    adaptive_partitions(conn, 2, 20)
    adaptive_partitions(conn, 2, 20, partition="w")
    conn.execute(b"select pgqueue.set_partition_limit(%s, 'w', null, null, null, null, 3)", (QUEUE,))
    assert (limit_of(conn, "w"), scalar(conn, "select adaptive_min from pgqueue.partitions where partition = 'w'")) \
        == (10, 2)


def test_concurrent_reports_of_one_overload_cut_once(dsn: str, conn: Conn) -> None:
    adaptive_partitions(conn, 1, 64, start=64)
    dispatch(conn, "a", 64)
    grants = grants_of(conn, "a", 64)
    assert len(grants) == 64
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def report(mine: list[dict[str, Any]]) -> None:
        with psycopg.connect(dsn, autocommit=True) as own:
            barrier.wait()
            for grant in mine:
                outcomes.append(str(own.execute(b"select pgqueue.backpressure(%s, %s, 0)",
                                                (grant["id"], grant["token"])).fetchone()[0]))  # type: ignore[index]

    threads = [threading.Thread(target=report, args=(grants[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("backpressured") == 64
    assert limit_of(conn, "a") == 57  # floor(64 x 0.9): one cut for 64 reports of jobs reserved together


@pytest.mark.parametrize(("partition", "low", "high", "message"), [
    ("a", 5, 4, "need 1 <= min <= max"), (None, 0, 4, "need 1 <= min <= max"),
    ("a", 2, None, "give both min and max"), ("", 1, 2, "partition")])
def test_bad_bounds_are_refused_and_store_nothing(conn: Conn, partition: str | None, low: int, high: int | None,
                                                  message: str) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=message):
        conn.execute(b"select pgqueue.set_partition_adaptive_limit(%s, %s, %s, %s)", (QUEUE, partition, low, high))
    assert rows(conn, "select * from pgqueue.partitions") == []
    assert rows(conn, "select * from pgqueue.queues") == []


@pytest.mark.parametrize("factor", [0.0, 1.0, -0.5, 2.0, float("nan")])
def test_a_bad_factor_is_refused(conn: Conn, factor: float) -> None:
    with pytest.raises(errors.InvalidParameterValue, match="above 0 and below 1"):
        conn.execute(b"select pgqueue.set_adaptive_decrease(%s, %s)", (QUEUE, factor))
    assert rows(conn, "select * from pgqueue.queues") == []


def test_prune_keeps_a_busy_or_own_adaptive_partition_and_drops_an_idle_one(conn: Conn) -> None:
    adaptive_partitions(conn, 1, 8, start=4)
    adaptive_partitions(conn, 1, 8, partition="own")
    for partition in ("idle", "busy"):
        dispatch(conn, partition, 2)
        grants = grants_of(conn, partition, 10)
        backpressure(conn, grants[0])
        ack(conn, [grants[1]["id"]], [grants[1]["token"]])
    conn.execute(b"delete from pgqueue.jobs where partition = 'idle'")
    scalar(conn, "select pgqueue.prune_partitions(100)")
    left = {r["partition"] for r in rows(conn, "select partition from pgqueue.partitions")}
    assert left == {"own", "busy"}


def test_partition_depths_give_the_busiest_and_one_row_for_the_rest(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_partition_limits(%s, 2, null, null)", (QUEUE,))
    enqueue_many(conn, [envelope(QUEUE) | {"partition": f"t{i:05d}"} for i in range(10_000)]
                 + [envelope(QUEUE) | {"partition": "big"} for _ in range(5)]
                 + [envelope(QUEUE) | {"partition": "other"} for _ in range(4)])
    found = rows(conn, "select * from pgqueue.partition_depths(3)")
    assert [r["partition"] for r in found] == ["big", "t00000", "t00001", None]  # 'other' is folded
    assert found[0]["waiting"] == 5 and found[0]["concurrency"] == 2 and found[0]["partitions"] == 1
    rest = found[-1]
    assert (rest["partitions"], rest["waiting"]) == (10_000 - 2 + 1, 10_000 - 2 + 4)


async def test_client_sets_and_shows_adaptive_partitions(client: Client) -> None:
    await client.set_limits(QUEUE, per_partition_concurrency=4, per_partition_adaptive=(2, 20),
                            adaptive_decrease=0.75)
    [control] = await client.controls()
    assert (control.partition_concurrency, control.partition_adaptive_min, control.partition_adaptive_max,
            control.adaptive_decrease) == (4, 2, 20, 0.75)
    await client.set_partition_limit(QUEUE, "tenant:big", concurrency=30, adaptive=(10, 100))
    assert [(p.partition, p.concurrency, p.adaptive_min, p.adaptive_max) for p in await client.partitions(QUEUE)] \
        == [("tenant:big", 30, 10, 100)]
    # Without per_partition_adaptive among the partition values: off; the start stays a fixed limit.
    await client.set_limits(QUEUE, per_partition_concurrency=4)
    [control] = await client.controls()
    assert (control.partition_adaptive_min, control.adaptive_decrease) == (None, 0.9)


@pytest.mark.parametrize("kwargs", [{"per_partition_adaptive": (5, 2)}, {"adaptive_decrease": 1.0},
                                    {"adaptive_decrease": True}, {"per_partition_adaptive": 5}])
async def test_bad_values_are_refused_in_python_and_store_nothing(client: Client, dsn: str,
                                                                  kwargs: dict[str, Any]) -> None:
    with pytest.raises(QueueConfigurationError, match="the limits were not changed"):
        await client.set_limits(QUEUE, **kwargs)
    with psycopg.connect(dsn) as own:
        assert own.execute(b"select count(*) from pgqueue.queues").fetchone() == (0,)


def test_parse_decrease() -> None:
    assert parse_decrease("0.75") == 0.75
    for text in ("1", "0", "x", "nan", "1e400"):
        with pytest.raises(QueueConfigurationError, match="the limits were not changed"):
            parse_decrease(text)
