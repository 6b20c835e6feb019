"""Results and the history of attempts (``pgqueue.job_results``, ``pgqueue.attempt_failures``):
acks that keep a result, a retry or a failure that keeps its attempt's error and worker, the
pending result of a job acked inside its handler's transaction, a job's state, progress reports,
the LISTEN of ``pgqueue_ended`` for waiters, and the pruning of what expired."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgqueue.resources import query
from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled, first


class ResultStatements(Pooled):
    """Results kept, attempts kept, a job's state."""

    __slots__ = ()

    async def ack_results(self, ids: list[uuid.UUID], tokens: list[int], durations: list[float | None],
                          waits: list[float | None], keep: bool, results: list[str | None],
                          ttls: list[float]) -> list[uuid.UUID]:
        """``ack`` of jobs whose result is kept: each accepted job's result (JSON text; None:
        pending, see :meth:`store_result`) goes to ``pgqueue.job_results`` for its ttl (seconds) in
        the same fenced statement, and its waiters are notified. Returns the ids the fence refused."""
        rows = await self._rows("ack_results", (ids, tokens, durations, waits, keep, results, ttls))
        return [row[0] for row in rows]

    async def release_failed(self, job_id: uuid.UUID, token: int, delay: float, duration: float | None,
                             wait: float | None, error: str) -> bool:
        """``release`` of a failed attempt for a retry, keeping its error (JSON text of an object
        of exception, message, traceback and worker) in ``pgqueue.attempt_failures``."""
        return bool(await self._value("release_error", (job_id, token, delay, duration, wait, error)))

    async def fail_by(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,  # noqa: PLR0913  # the parameters of pgqueue.fail
                      traceback: str | None, reason: str, duration: float | None, wait: float | None,
                      worker: str) -> bool:
        """``fail`` naming the worker whose attempt failed (kept with the failure and its attempt)."""
        params = (job_id, token, exception, message, traceback, reason, duration, wait, worker)
        return bool(await self._value("fail_worker", params))

    async def store_result(self, job_id: uuid.UUID, token: int, result: str) -> bool:
        """Write the pending result of a job acked inside its handler's transaction, fenced by the
        attempt's token; False when there is no pending result of that token."""
        return bool(await self._value("store_result", (job_id, token, result)))

    @staticmethod
    async def ack_in_transaction_kept(conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID, token: int,
                                      began: str, ttl: float) -> bool | None:
        """``ack_in_transaction`` of a job whose result is kept: the ack leaves its result pending
        (for :meth:`store_result`), kept ``ttl`` seconds."""
        cur = await conn.execute(query("ack_in_transaction_kept"), (began, job_id, token, ttl))
        acked = first(await cur.fetchone())
        return None if acked is None else bool(acked)

    @staticmethod
    def ack_in_transaction_kept_sync(conn: psycopg.Connection[Any], job_id: uuid.UUID, token: int,
                                     began: str, ttl: float) -> bool | None:
        """:meth:`ack_in_transaction_kept` on a blocking connection."""
        cur = conn.execute(query("ack_in_transaction_kept"), (began, job_id, token, ttl))
        acked = first(cur.fetchone())
        return None if acked is None else bool(acked)

    async def job_state(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        """``pgqueue.job_state``: one job's state, times, result, failure and failed attempts; None
        when pgqueue knows nothing of the id (never dispatched, or acked keeping nothing)."""
        with storage_errors(f"reading the state of job {job_id}"):
            rows = await self._dicts("job_state", (job_id,))
        return rows[0] if rows else None

    async def job_args(self, job_id: uuid.UUID) -> tuple[bool, Any]:
        """The args kept of a job (its live row, latest failure or completed copy) to mask what its
        class declares secret: (found, args). Raises QueueStorageError (SQLSTATE 42501) for a role
        that may not read those tables."""
        with storage_errors(f"reading the args of job {job_id}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query("job_args"), {"job_id": job_id})
                row = await cur.fetchone()
        return (row is not None), (row[0] if row is not None else None)

    @staticmethod
    def job_args_sync(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> tuple[bool, Any]:
        """:meth:`job_args` on a blocking connection."""
        with storage_errors(f"reading the args of job {job_id}"):
            row = conn.execute(query("job_args"), {"job_id": job_id}).fetchone()
        return (row is not None), (row[0] if row is not None else None)

    @staticmethod
    def job_state_sync(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any] | None:
        """:meth:`job_state` on a blocking connection."""
        cur = conn.cursor(row_factory=dict_row)
        cur.execute(query("job_state"), (job_id,))
        return cur.fetchone()

    @staticmethod
    def listen_ended_sync(conn: psycopg.Connection[Any]) -> None:
        """:meth:`listen_ended` on a blocking connection."""
        conn.execute(query("listen_ended"))

    @staticmethod
    async def listen_ended(conn: psycopg.AsyncConnection[Any]) -> None:
        """LISTEN for ended jobs (channel ``pgqueue_ended``, payload = job id)."""
        await conn.execute(query("listen_ended"))

    async def progress(self, job_id: uuid.UUID, token: int, fraction: float | None, note: str | None) -> bool:
        """Store a running handler's progress report (``pgqueue.progress``, fenced by its token;
        ``note``: JSON text); False if the fence refused."""
        return bool(await self._value("progress", (job_id, token, fraction, note)))

    async def prune_results(self, attempts_retention: float, batch: int) -> tuple[int, int, int]:
        """Delete at most ``batch`` expired results, ``batch`` failed attempts of jobs gone for
        ``attempts_retention`` seconds and ``batch`` dependency rows and batches of jobs gone as
        long; returns how many of each."""
        row = await self._row("prune_results", (attempts_retention, batch))
        return (0, 0, 0) if row is None else (int(row[0]), int(row[1]), int(row[2]))
