"""Adaptive limits (issue 28): backpressure cuts a queue's concurrency limit (to floor(limit x its
adaptive_decrease), at least one less: 0.9 by default since revision 0010, 0.5 halves), a window of acks
grows it by one, within its bounds; the backpressured job runs again later without using up a try.
Decided in pgqueue.backpressure and pgqueue.ack; visible in pgqueue.queues."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import errors

from pgqueue import Backpressure, Client, Job, JobContext, QueueConfigurationError, parse_adaptive
from tests.api_support import client, job_rows, run_worker
from tests.helpers import envelope
from tests.sql_calls import ack, enqueue, enqueue_many, reserve, rows, scalar

__all__ = ["client"]

Conn = psycopg.Connection[tuple[Any, ...]]


def limit_of(conn: Conn, queue: str = "default") -> dict[str, Any]:
    """The queue's row: current limit, bounds, window."""
    return rows(conn, "select concurrency, adaptive_min, adaptive_max, adaptive_acks from pgqueue.queues "
                      "where name = %s", (queue,))[0]


def backpressure(conn: Conn, job_id: uuid.UUID, token: int, delay: float = 0.0) -> str:
    """pgqueue.backpressure: 'backpressured', 'not_yours' or 'past_deadline'."""
    outcome: str = scalar(conn, "select pgqueue.backpressure(%s, %s, %s)", (job_id, token, delay))
    return outcome


def test_set_adaptive_limit_starts_at_min_or_the_clamped_current_limit(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_adaptive_limit('default', 2, 8)")
    assert limit_of(conn) == {"concurrency": 2, "adaptive_min": 2, "adaptive_max": 8, "adaptive_acks": 0}
    conn.execute(b"select pgqueue.set_limits('other', 20, null, null)")
    conn.execute(b"select pgqueue.set_adaptive_limit('other', 2, 8)")
    assert limit_of(conn, "other")["concurrency"] == 8
    # Off: the limit stays where it is, a fixed one.
    conn.execute(b"select pgqueue.set_adaptive_limit('other', null, null)")
    assert limit_of(conn, "other") == {"concurrency": 8, "adaptive_min": None, "adaptive_max": None,
                                       "adaptive_acks": 0}


def test_backpressure_halves_the_limit_never_below_min_and_once_per_overload(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_limits('default', 16, null, null)")
    conn.execute(b"select pgqueue.set_adaptive_limit('default', 3, 16)")
    conn.execute(b"select pgqueue.set_adaptive_decrease('default', 0.5)")  # revision 0009's rule: halve
    enqueue_many(conn, [envelope() for _ in range(20)])
    first = reserve(conn, ["default"], 16)
    assert len(first) == 16
    assert backpressure(conn, first[0]["id"], first[0]["token"]) == "backpressured"
    assert limit_of(conn)["concurrency"] == 8
    # The other 15 were reserved before that cut: their backpressure is the same overload.
    for grant in first[1:6]:
        assert backpressure(conn, grant["id"], grant["token"]) == "backpressured"
    assert limit_of(conn)["concurrency"] == 8
    # 10 still run, above the new limit of 8: nothing is granted until they drop below it.
    assert reserve(conn, ["default"], 5) == []
    ack(conn, [g["id"] for g in first[6:]], [g["token"] for g in first[6:]])
    assert limit_of(conn)["concurrency"] == 9  # those 10 acks filled a window of 8
    later = reserve(conn, ["default"], 20)
    assert len(later) == 9
    assert backpressure(conn, later[0]["id"], later[0]["token"]) == "backpressured"
    assert limit_of(conn)["concurrency"] == 4
    time.sleep(0.001)  # reserved_at and the cut are microseconds apart: keep them ordered (clock_timestamp)
    conn.execute(b"select pgqueue.set_adaptive_limit('default', 3, 16)")  # a new overload window
    assert backpressure(conn, later[1]["id"], later[1]["token"]) == "backpressured"
    assert limit_of(conn)["concurrency"] == 3  # 4 // 2 = 2, held at min 3


def test_the_default_cut_is_a_tenth_at_least_one_never_below_min(conn: Conn) -> None:
    # Revision 0010: floor(limit x 0.9), at least one less (Netflix concurrency-limits' backoff ratio).
    conn.execute(b"select pgqueue.set_limits('default', 50, null, null)")
    conn.execute(b"select pgqueue.set_adaptive_limit('default', 4, 50)")
    seen = []
    for _ in range(6):
        enqueue(conn, envelope())
        grant = reserve(conn, ["default"])[0]
        assert backpressure(conn, grant["id"], grant["token"], 60) == "backpressured"
        seen.append(limit_of(conn)["concurrency"])
        time.sleep(0.001)  # the next job is reserved after this cut: a new overload
    assert seen == [45, 40, 36, 32, 28, 25]
    conn.execute(b"select pgqueue.set_limits('default', 5, null, null)")
    for _ in range(3):
        enqueue(conn, envelope())
        grant = reserve(conn, ["default"])[0]
        backpressure(conn, grant["id"], grant["token"], 60)
        time.sleep(0.001)
    assert limit_of(conn)["concurrency"] == 4  # 5 -> 4 (one less), then held at min 4


def test_a_window_of_acks_grows_the_limit_by_one_never_above_max(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_adaptive_limit('default', 2, 4)")
    enqueue_many(conn, [envelope() for _ in range(60)])
    seen = []
    for _ in range(12):
        grants = reserve(conn, ["default"], 10)
        assert len(grants) == limit_of(conn)["concurrency"]
        ack(conn, [g["id"] for g in grants], [g["token"] for g in grants])
        seen.append(limit_of(conn)["concurrency"])
    # Each batch holds a whole window (as many acks as the limit): one step each, held at max.
    assert seen[:4] == [3, 4, 4, 4]
    assert max(seen) == 4
    # Partial windows accumulate: 2 acks of a window of 4.
    conn.execute(b"select pgqueue.set_adaptive_limit('default', 4, 6)")
    grants = reserve(conn, ["default"], 2)
    ack(conn, [g["id"] for g in grants], [g["token"] for g in grants])
    assert limit_of(conn) == {"concurrency": 4, "adaptive_min": 4, "adaptive_max": 6, "adaptive_acks": 2}


def test_an_ack_on_an_adaptive_queue_also_releases_the_jobs_waiting_for_it(conn: Conn) -> None:
    # ack 0009 does both: pgqueue.jobs_ended for a job with dependents (issue 26) and the window.
    conn.execute(b"select pgqueue.set_adaptive_limit('default', 1, 4)")
    parent = enqueue(conn, envelope())
    with conn.transaction():
        child = enqueue(conn, envelope())
        scalar(conn, "select pgqueue.add_dependencies(%s::uuid[], %s::uuid[], 'cancel')", ([child], [parent]))
    [grant] = reserve(conn, ["default"], 5)
    assert grant["id"] == parent
    assert ack(conn, [parent], [grant["token"]]) == {parent: True}
    assert limit_of(conn)["concurrency"] == 2  # a window of 1 ack at limit 1
    assert [g["id"] for g in reserve(conn, ["default"], 5)] == [child]


def test_acks_of_queues_without_an_adaptive_limit_do_not_write_pgqueue_queues(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_limits('default', 5, null, null)")
    before = scalar(conn, "select xmin::text from pgqueue.queues where name = 'default'")
    enqueue_many(conn, [envelope() for _ in range(5)])
    grants = reserve(conn, ["default"], 5)
    ack(conn, [g["id"] for g in grants], [g["token"] for g in grants])
    assert scalar(conn, "select xmin::text from pgqueue.queues where name = 'default'") == before
    assert limit_of(conn)["concurrency"] == 5


def test_a_backpressured_job_runs_later_without_using_up_a_try(conn: Conn) -> None:
    job_id = enqueue(conn, envelope(tries=1))
    grant = reserve(conn, ["default"])[0]
    assert backpressure(conn, job_id, grant["token"] + 1) == "not_yours"
    assert backpressure(conn, job_id, grant["token"], 30) == "backpressured"
    row = rows(conn, "select attempts, snoozes, token, extract(epoch from available_at - clock_timestamp()) "
                     "as due_in from pgqueue.jobs where id = %s", (job_id,))[0]
    assert row["attempts"] == 0 and row["snoozes"] == 1 and row["token"] is None
    assert 25 < row["due_in"] <= 30
    assert backpressure(conn, job_id, grant["token"]) == "not_yours"  # the fence: its token is gone
    assert scalar(conn, "select sum(given_back) from pgqueue.job_stats") == 1
    # No adaptive limit on the queue: no row is written for it.
    assert scalar(conn, "select count(*) from pgqueue.queues") == 0


def test_backpressure_past_the_deadline_leaves_the_job_and_cuts_the_limit(conn: Conn) -> None:
    conn.execute(b"select pgqueue.set_adaptive_limit('default', 1, 8)")
    conn.execute(b"update pgqueue.queues set concurrency = 8")
    job_id = enqueue(conn, envelope(retry_until=time.time() + 60))
    grant = reserve(conn, ["default"])[0]
    assert backpressure(conn, job_id, grant["token"], 3600) == "past_deadline"
    assert limit_of(conn)["concurrency"] == 7  # floor(8 x 0.9), the default factor
    assert scalar(conn, "select token from pgqueue.jobs where id = %s", (job_id,)) == grant["token"]


@pytest.mark.parametrize(("low", "high", "says"), [
    (0, 5, "need 1 <= min <= max, got min 0 and max 5"),
    (-3, 5, "need 1 <= min <= max, got min -3 and max 5"),
    (6, 5, "need 1 <= min <= max, got min 6 and max 5"),
    (2, None, "give both min and max"),
])
def test_bad_bounds_are_refused_in_sql_and_store_nothing(conn: Conn, low: int, high: int | None,
                                                         says: str) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=says):
        conn.execute(b"select pgqueue.set_adaptive_limit('default', %s, %s)", (low, high))
    assert scalar(conn, "select count(*) from pgqueue.queues") == 0


def test_a_bad_delay_is_refused(conn: Conn) -> None:
    job_id = enqueue(conn, envelope())
    grant = reserve(conn, ["default"])[0]
    with pytest.raises(errors.InvalidParameterValue, match="delay must be a finite number of seconds"):
        backpressure(conn, job_id, grant["token"], -1)


@pytest.mark.parametrize(("adaptive", "says"), [
    ((0, 5), "adaptive must be a pair"),
    ((-1, 5), "adaptive must be a pair"),
    ((6, 5), "min 6 is above max 5"),
    ((1.5, 5), "adaptive must be a pair"),
    ((1, 2, 3), "adaptive must be a pair"),
])
async def test_bad_bounds_are_refused_in_python_and_store_nothing(client: Client, dsn: str, adaptive: Any,
                                                                  says: str) -> None:
    with pytest.raises(QueueConfigurationError, match=says):
        await client.set_limits("default", adaptive=adaptive)
    assert await client.controls() == []


@pytest.mark.parametrize("text", ["5", "a:b", "0:4", "5:2", ":3", "1:"])
def test_parse_adaptive_refuses_what_is_not_min_max(text: str) -> None:
    with pytest.raises(QueueConfigurationError):
        parse_adaptive(text)


async def test_client_sets_shows_and_clears_an_adaptive_limit(client: Client) -> None:
    assert parse_adaptive("2:50") == (2, 50)
    await client.set_limits("mail", concurrency=10, adaptive=(2, 50))
    [control] = await client.controls()
    assert (control.concurrency, control.adaptive_min, control.adaptive_max) == (10, 2, 50)
    await client.set_limits("mail", concurrency=10)
    [control] = await client.controls()
    assert (control.concurrency, control.adaptive_min, control.adaptive_max) == (10, None, None)


async def test_adaptive_bounds_and_per_partition_limits_set_together_and_apart(client: Client) -> None:
    await client.set_limits("mail", concurrency=10, adaptive=(2, 50), per_partition_concurrency=3, fair=True)
    [control] = await client.controls()
    assert (control.concurrency, control.adaptive_min, control.adaptive_max) == (10, 2, 50)
    assert (control.partition_concurrency, control.fair) == (3, True)
    # Without adaptive= the limit is fixed again; the per-partition values not given stay.
    await client.set_limits("mail", concurrency=10)
    [control] = await client.controls()
    assert (control.adaptive_min, control.partition_concurrency, control.fair) == (None, 3, True)


SEEN: list[tuple[int, int]] = []


class Overloaded(Job):
    """Meets backpressure on its first run, then succeeds; one try only."""

    name = "tests.adaptive.overloaded"
    tries = 1

    via_context: bool = False

    async def handle(self, context: JobContext) -> None:
        SEEN.append((context.attempts, int(time.monotonic())))
        if len(SEEN) == 1:
            if self.via_context:
                await context.backpressure(0)
            else:
                raise Backpressure("429 from the API", retry_after=0)


@pytest.mark.parametrize("via_context", [False, True])
async def test_a_worker_puts_a_backpressured_job_back_without_a_try_and_halves_the_limit(
        client: Client, dsn: str, via_context: bool) -> None:
    SEEN.clear()
    await client.set_limits("default", concurrency=6, adaptive=(1, 6), adaptive_decrease=0.5)
    await client.dispatch(Overloaded(via_context=via_context))
    worker = await run_worker(client, schedules=False)
    # tries = 1: a retry would have failed it; it ran twice, each time as attempt 1.
    assert [attempts for attempts, _ in SEEN] == [1, 1]
    assert job_rows(dsn) == []
    assert worker.stats.backpressured == 1 and worker.stats.acked == 1
    [control] = await client.controls()
    assert control.concurrency == 3


async def test_retry_after_delays_the_job(client: Client, dsn: str) -> None:
    class Later(Job):
        name = "tests.adaptive.later"

        async def handle(self, context: JobContext) -> None:
            raise Backpressure(retry_after=120)

    await client.dispatch(Later())
    await run_worker(client, schedules=False)
    [row] = job_rows(dsn)
    assert row["attempts"] == 0 and row["token"] is None
    assert 100 < row["due_in"] <= 120
