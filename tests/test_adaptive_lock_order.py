"""An ack and a backpressure report of one adaptive queue or partition never deadlock (revision 0010).

pgqueue.backpressure locks the queue's or partition's row, then the history's row
(pgqueue.job_stats, one per minute, queue, job name and backend shard); pgqueue.ack once took the
history's row first and the adaptive row after. Two backends on one shard could each hold what the
other waited for: PostgreSQL broke the cycle by failing one, and a job of tries = 1 went to
failed_jobs (seen in a CI run of the fault suite). Here the ack is held, by an advisory lock a
trigger of the test's own takes, right where it writes the history, while the report runs."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from tests.helpers import envelope
from tests.sql_calls import enqueue_many, reserve, scalar
from tests.worker_support import wait_until

Conn = psycopg.Connection[tuple[Any, ...]]
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


@pytest.mark.parametrize("scope", ["partition", "queue"])
async def test_an_ack_and_a_backpressure_report_of_one_adaptive_limit_never_deadlock(dsn: str, conn: Conn,
                                                                                     scope: str) -> None:
    if scope == "partition":
        conn.execute(b"select pgqueue.set_partition_adaptive_limit(%s, null, 2, 8)", (QUEUE,))
        enqueue_many(conn, [envelope(QUEUE) | {"partition": "a"} for _ in range(2)])
    else:
        conn.execute(b"select pgqueue.set_adaptive_limit(%s, 2, 8)", (QUEUE,))
        enqueue_many(conn, [envelope(QUEUE) for _ in range(2)])
    acked, pressed = reserve(conn, [QUEUE], 2)
    conn.execute(GATE_DDL.encode())
    acker, reporter, spare = same_shard_pair(dsn)
    try:
        acker.execute(b"set application_name = 'gated'")
        conn.execute(b"select pg_advisory_lock(%s)", (GATE,))
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(2) as threads:
            ack = loop.run_in_executor(threads, lambda: acker.execute(
                b"select acked from pgqueue.ack(%s::uuid[], %s::bigint[])",
                ([acked["id"]], [acked["token"]])).fetchall())
            await wait_until(lambda: waiting(conn, acker.info.backend_pid), "the ack to wait at the gate")
            report = loop.run_in_executor(threads, lambda: reporter.execute(
                b"select pgqueue.backpressure(%s, %s, 0)", (pressed["id"], pressed["token"])).fetchall())
            await wait_until(lambda: waiting(conn, reporter.info.backend_pid), "the report to wait for the ack")
            conn.execute(b"select pg_advisory_unlock(%s)", (GATE,))
            assert await ack == [(True,)]
            assert await report == [("backpressured",)]
    finally:
        for opened in (acker, reporter, *spare):
            opened.close()
    assert scalar(conn, "select count(*) from pgqueue.failed_jobs") == 0
    left: uuid.UUID = scalar(conn, "select id from pgqueue.jobs")
    assert left == pressed["id"]
