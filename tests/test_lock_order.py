"""Statements that end jobs never deadlock on the rows they share (revision 0010).

Every statement that ends an attempt writes the history (pgqueue.job_stats, one row per minute,
queue, job name and backend shard) last: after the jobs, a queue's or partition's adaptive window
(pgqueue.ack, pgqueue.backpressure, pgqueue.reserve) and a batch's counts (pgqueue.jobs_ended, from
ack and from fail through the failed_jobs trigger). pgqueue.ack once wrote the history first: two
backends on one shard could each hold what the other waited for, PostgreSQL broke the cycle by
failing one, and a job of tries = 1 went to failed_jobs (seen in a CI run of the fault suite). Here
the ack is held, by an advisory lock a trigger of the test's own takes, right where it writes the
history, while the other statement runs; on the old order each case deadlocks."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from tests.helpers import envelope
from tests.sql_calls import enqueue, enqueue_many, reserve, scalar
from tests.worker_support import wait_until

Conn = psycopg.Connection[tuple[Any, ...]]
Row = dict[str, Any]
QUEUE = "tenants"
GATE = 280_010

#: Holds a backend named 'gated' where it writes pgqueue.job_stats, until the test lets it go.
GATE_DDL = f"""
create function public.gate_history() returns trigger language plpgsql as $$
begin
    if current_setting('application_name') = 'gated' then
        perform pg_advisory_xact_lock({GATE});
    end if;
    return null;
end $$;
create trigger gate_history after insert or update on pgqueue.job_stats
    for each row execute function public.gate_history();
"""

ACK = b"select acked from pgqueue.ack(%s::uuid[], %s::bigint[])"
BACKPRESSURE = b"select pgqueue.backpressure(%s, %s, 0)"
FAIL = b"select pgqueue.fail(%s, %s, 'app.Boom', 'boom', null, 'exception')"


def same_shard_pair(dsn: str) -> tuple[Conn, Conn, list[Conn]]:
    """Two autocommit connections whose backends share a history shard (pid modulo 8), and the
    others opened on the way (to be closed)."""
    spare: list[Conn] = []
    by_shard: dict[int, Conn] = {}
    for _ in range(9):  # nine backends: two of them share one of eight shards
        opened: Conn = psycopg.connect(dsn, autocommit=True)
        shard = opened.info.backend_pid % 8
        if shard in by_shard:
            return by_shard[shard], opened, spare
        by_shard[shard] = opened
        spare.append(opened)
    raise AssertionError("nine backends on eight shards")


def waiting(conn: Conn, pid: int) -> bool:
    return bool(scalar(conn, "select wait_event_type = 'Lock' from pg_stat_activity where pid = %s", (pid,)))


def two_reserved(conn: Conn, scope: str) -> tuple[Row, Row]:
    """Two reserved jobs of ``scope``: an adaptive partition, an adaptive queue, or a batch's members."""
    if scope == "partition":
        conn.execute(b"select pgqueue.set_partition_adaptive_limit(%s, null, 2, 8)", (QUEUE,))
        enqueue_many(conn, [envelope(QUEUE) | {"partition": "a"} for _ in range(2)])
    elif scope == "queue":
        conn.execute(b"select pgqueue.set_adaptive_limit(%s, 2, 8)", (QUEUE,))
        enqueue_many(conn, [envelope(QUEUE) for _ in range(2)])
    else:
        with conn.transaction():
            members = [enqueue(conn, envelope(QUEUE)) for _ in range(2)]
            callback = enqueue(conn, envelope("callbacks"))
            conn.execute(b"select pgqueue.add_batch(%s, %s::uuid[], %s)", (uuid.uuid4(), members, callback))
    first, second = reserve(conn, [QUEUE], 2)
    return first, second


@pytest.mark.parametrize(("scope", "other", "answer"), [
    ("partition", BACKPRESSURE, "backpressured"), ("queue", BACKPRESSURE, "backpressured"),
    ("batch", FAIL, True)])
async def test_an_ack_held_at_the_history_never_deadlocks_with_what_ends_a_job_beside_it(
        dsn: str, conn: Conn, scope: str, other: bytes, answer: object) -> None:
    acked, ended = two_reserved(conn, scope)
    conn.execute(GATE_DDL.encode())
    acker, reporter, spare = same_shard_pair(dsn)
    try:
        acker.execute(b"set application_name = 'gated'")
        conn.execute(b"select pg_advisory_lock(%s)", (GATE,))
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(2) as threads:
            ack = loop.run_in_executor(threads, lambda: acker.execute(
                ACK, ([acked["id"]], [acked["token"]])).fetchall())
            await wait_until(lambda: waiting(conn, acker.info.backend_pid), "the ack to wait at the gate")
            report = loop.run_in_executor(threads, lambda: reporter.execute(
                other, (ended["id"], ended["token"])).fetchall())
            await wait_until(lambda: waiting(conn, reporter.info.backend_pid), "the other to wait for the ack")
            conn.execute(b"select pg_advisory_unlock(%s)", (GATE,))
            assert await ack == [(True,)]
            assert await report == [(answer,)]
    finally:
        for opened in (acker, reporter, *spare):
            opened.close()
    if scope == "batch":
        assert scalar(conn, "select array[pending, succeeded, failed] from pgqueue.batches") == [0, 1, 1]
    else:
        assert scalar(conn, "select count(*) from pgqueue.failed_jobs") == 0
        assert scalar(conn, "select id from pgqueue.jobs") == ended["id"]
