"""Fixtures and helpers shared by the tests of the Python API (tests/test_api_*.py)."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from pgqueue import Client, Worker

# One definition of the settings and the open-queue fixture for every test module.
from tests.worker_support import NO_PYPROJECT, client, settings_for

__all__ = ["NO_PYPROJECT", "client", "failed_rows", "job_rows", "run_worker", "settings_for"]


async def run_worker(target: Client, *, queues: tuple[str, ...] = ("default",), concurrency: int = 4,
                     **options: Any) -> Worker:
    """Run a worker until no job is ready now; returns it (for its stats)."""
    worker = await target.worker(queues=queues, concurrency=concurrency, listen=False, **options)
    await worker.run(stop_when_empty=True)
    return worker


def job_rows(dsn: str) -> list[dict[str, Any]]:
    """Every row of pgqueue.jobs, oldest first, with its envelope decoded."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select id, queue, priority, attempts, max_tries, token, envelope,"
            " extract(epoch from available_at - now()) as due_in"
            " from pgqueue.jobs order by created_at, id"
        ).fetchall()
    return [
        {"id": r[0], "queue": r[1], "priority": r[2], "attempts": r[3], "max_tries": r[4], "token": r[5],
         "envelope": r[6] if isinstance(r[6], dict) else json.loads(r[6]), "due_in": float(r[7])}
        for r in rows
    ]


def failed_rows(dsn: str) -> list[dict[str, Any]]:
    """Every row of pgqueue.failed_jobs, oldest first."""
    with psycopg.connect(dsn) as conn:
        cur = conn.cursor(row_factory=psycopg.rows.dict_row)
        return cur.execute("select * from pgqueue.failed_jobs order by failed_at, id").fetchall()
