"""Thin wrappers around pgqueue's stored functions for the SQL-level tests.

Each wrapper is one call of one function, as an operator would type it in psql, so a
test reads as the sequence of state changes it checks. Rows come back as dicts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[tuple[Any, ...]]
Row = dict[str, Any]


def rows(conn: Conn, statement: str, params: Sequence[Any] | dict[str, Any] | None = None) -> list[Row]:
    """All rows of ``statement`` as dicts."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(statement.encode(), params)
        return cur.fetchall()


def scalar(conn: Conn, statement: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
    """The first column of the first row of ``statement``."""
    row = conn.execute(statement.encode(), params).fetchone()
    assert row is not None
    return row[0]


def enqueue(conn: Conn, envelope: dict[str, Any], delay: float = 0.0) -> uuid.UUID:
    """pgqueue.enqueue: the new job's id."""
    job_id: uuid.UUID = scalar(conn, "select pgqueue.enqueue(%s, %s)", (Jsonb(envelope), delay))
    return job_id


def enqueue_many(conn: Conn, envelopes: list[dict[str, Any]], delays: list[float] | None = None) -> int:
    """pgqueue.enqueue_many: how many jobs were inserted."""
    count: int = scalar(conn, "select pgqueue.enqueue_many(%s, %s::double precision[])",
                        (Jsonb(envelopes), delays))
    return count


def reserve(conn: Conn, queues: list[str], max_jobs: int = 1, lease: float = 60.0) -> list[Row]:
    """pgqueue.reserve: the reservations granted, in the order the function returns them."""
    return rows(conn, "select * from pgqueue.reserve(%s::text[], %s, %s)", (queues, max_jobs, lease))


def ack(conn: Conn, ids: list[uuid.UUID], tokens: list[int]) -> dict[uuid.UUID, bool]:
    """pgqueue.ack: per job id, whether the acknowledgement was accepted."""
    found = rows(conn, "select id, acked from pgqueue.ack(%s::uuid[], %s::bigint[])", (ids, tokens))
    return {r["id"]: r["acked"] for r in found}


def release(conn: Conn, job_id: uuid.UUID, token: int, delay: float = 0.0) -> bool:
    """pgqueue.release: whether the fence matched."""
    released: bool = scalar(conn, "select pgqueue.release(%s, %s, %s)", (job_id, token, delay))
    return released


def fail(conn: Conn, job_id: uuid.UUID, token: int, *, exception: str | None = "app.Boom",
         message: str = "boom", traceback: str | None = "Traceback ...", reason: str = "exception") -> bool:
    """pgqueue.fail: whether the fence matched (and the job moved to failed_jobs)."""
    moved: bool = scalar(conn, "select pgqueue.fail(%s, %s, %s, %s, %s, %s)",
                         (job_id, token, exception, message, traceback, reason))
    return moved


def extend(conn: Conn, job_id: uuid.UUID, token: int, seconds: float) -> Row:
    """pgqueue.extend: extended, lease_expires_at, lease_seconds_left."""
    return rows(conn, "select * from pgqueue.extend(%s, %s, %s)", (job_id, token, seconds))[0]


def job(conn: Conn, job_id: uuid.UUID) -> Row | None:
    """The jobs row of ``job_id``, or None when there is none."""
    found = rows(conn, "select * from pgqueue.jobs where id = %s", (job_id,))
    return found[0] if found else None


def jobs(conn: Conn) -> list[Row]:
    """Every jobs row, by id."""
    return rows(conn, "select * from pgqueue.jobs order by id")


def failures(conn: Conn) -> list[Row]:
    """Every failed_jobs row, oldest first."""
    return rows(conn, "select * from pgqueue.failed_jobs order by failed_at, id")


def expire_lease(conn: Conn, job_id: uuid.UUID) -> None:
    """Let time pass for one reservation: its lease ends in the past (database clock)."""
    conn.execute(b"update pgqueue.jobs set available_at = now() - interval '1 second' where id = %s",
                 (job_id,))


def make_due(conn: Conn) -> int:
    """Let time pass for delayed jobs: every unreserved job becomes available now."""
    cur = conn.execute(b"update pgqueue.jobs set available_at = now() - interval '1 millisecond'"
                       b" where token is null and available_at > now()")
    return cur.rowcount


def db_epoch(conn: Conn, offset_seconds: float = 0.0) -> float:
    """The database clock as epoch seconds, plus ``offset_seconds`` (for retry_until)."""
    value: float = scalar(conn, "select extract(epoch from now())::double precision + %s", (offset_seconds,))
    return value
