"""The jobs the fault tests run. Each handler first appends its execution to ``fault_ledger``.

The ledger write is its own autocommit statement on a connection of the process running the
handler (a worker subprocess, or the test process for in-process workers). Its DSN comes from
``PGQUEUE_FAULT_LEDGER_DSN`` or :func:`use_ledger`.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgqueue import Backpressure, Job, JobContext

LEDGER_DSN_ENV = "PGQUEUE_FAULT_LEDGER_DSN"
_APPEND = b"insert into fault_ledger (job_id, attempt, token, worker_pid) values (%s, %s, %s, %s)"


class _Ledger:
    """One connection per process; reconnects after the connection broke (the failed write raises)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()

    async def append(self, context: JobContext) -> None:
        async with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    # synchronous_commit=off: a ledger row is not worth a WAL flush per job on a
                    # server with fsync on; only a server crash could lose it (fast shutdown does not).
                    self._conn = await psycopg.AsyncConnection.connect(
                        self.dsn, autocommit=True, prepare_threshold=None, application_name="fault_ledger",
                        options="-c synchronous_commit=off")
                await self._conn.execute(_APPEND, (context.id, context.attempts, context.token, os.getpid()))
            except (psycopg.Error, OSError):
                await self.close()
                raise

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


_ledger: _Ledger | None = None


def use_ledger(dsn: str | None) -> None:
    """Point the handlers of this process at a database's ledger (None: back to the environment)."""
    global _ledger  # noqa: PLW0603
    _ledger = None if dsn is None else _Ledger(dsn)


async def close_ledger() -> None:
    """Close this process's ledger connection."""
    if _ledger is not None:
        await _ledger.close()


async def append(context: JobContext) -> None:
    """Record this execution in the ledger."""
    global _ledger  # noqa: PLW0603
    if _ledger is None:
        _ledger = _Ledger(os.environ[LEDGER_DSN_ENV])
    await _ledger.append(context)


class LedgerJob(Job):
    """Records its execution, then works ``work`` seconds (awaiting)."""

    name = "faults:ledger"

    n: int
    work: float = 0.0

    async def handle(self, context: JobContext) -> None:
        await append(context)
        if self.work:
            await asyncio.sleep(self.work)


class PoisonJob(Job):
    """Records its execution, then kills the process running it, every time."""

    name = "faults:poison"
    tries = 3

    n: int = 0

    async def handle(self, context: JobContext) -> None:
        await append(context)
        os._exit(17)


class OutlivesLeaseJob(Job):
    """On attempt 1, blocks its worker's event loop until another holder has completed the job.

    A handler that does not yield (CPU-bound work, a synchronous call) cannot be interrupted by
    the worker's timeout: its lease expires while it runs. The wait is bounded.
    """

    name = "faults:outlives-lease"

    n: int = 0

    async def handle(self, context: JobContext) -> None:
        await append(context)
        if context.attempts > 1:
            return
        dsn = _ledger.dsn if _ledger is not None else os.environ[LEDGER_DSN_ENV]
        deadline = time.monotonic() + 30
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                if conn.execute(b"select 1 from fault_acks where job_id = %s", (context.id,)).fetchone():
                    return
                time.sleep(0.05)  # noqa: ASYNC251 -- blocking the event loop is the point


class EchoJob(Job):
    """Records its execution and the args and queue it received (``fault_echo``); ``fail`` fails it."""

    name = "faults:echo"

    text: str = ""
    data: Any = None
    fail: bool = False

    async def handle(self, context: JobContext) -> None:
        await append(context)
        dsn = _ledger.dsn if _ledger is not None else os.environ[LEDGER_DSN_ENV]
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(b"insert into fault_echo (job_id, queue, text, data) values (%s, %s, %s, %s)",
                               (context.id, context.queue, self.text, Jsonb(self.data)))
        if self.fail:
            await context.fail(f"asked to fail: {self.text}")


class AlwaysFailsJob(Job):
    """Records its execution, then raises (retried until its tries are used)."""

    name = "faults:always-fails"
    tries = 2

    n: int = 0

    async def handle(self, context: JobContext) -> None:
        await append(context)
        raise RuntimeError(f"job {self.n} fails on purpose (attempt {context.attempts})")


def _ledger_dsn() -> str:
    return _ledger.dsn if _ledger is not None else os.environ[LEDGER_DSN_ENV]


class SpanJob(Job):
    """Records when its handler starts and ends (``fault_spans``, database clock), working
    ``work`` seconds between the two: the ledger of the global-limit tests (issue 14)."""

    name = "faults:span"

    n: int
    work: float = 0.0

    async def handle(self, context: JobContext) -> None:
        async with await psycopg.AsyncConnection.connect(_ledger_dsn(), autocommit=True) as conn:
            await conn.execute(b"insert into fault_spans (n, event) values (%s, 'start')", (self.n,))
            if self.work:
                await asyncio.sleep(self.work)
            await conn.execute(b"insert into fault_spans (n, event) values (%s, 'end')", (self.n,))


class EffectJob(Job):
    """Records its execution, works ``work`` seconds, then writes its effect (``fault_effects``)
    through ``context.transaction()``: the effect commits with the job's fenced ack (issue 14)."""

    name = "faults:effect"
    tries = 25

    n: int
    work: float = 0.0

    async def handle(self, context: JobContext) -> None:
        await append(context)
        if self.work:
            await asyncio.sleep(self.work)
        async with context.transaction() as conn:
            await conn.execute(b"insert into fault_effects (job_id, n, token) values (%s, %s, %s)",
                               (context.id, self.n, context.token))


class PressedSpanJob(Job):
    """As :class:`SpanJob`, and every ``press``-th job meets backpressure on its first run (a row in
    ``fault_pressed`` marks it), so its queue's adaptive limit is halved and grows back (issue 28)."""

    name = "faults:pressed_span"
    tries = 1

    n: int
    work: float = 0.0
    press: int = 4

    async def handle(self, context: JobContext) -> None:
        async with await psycopg.AsyncConnection.connect(_ledger_dsn(), autocommit=True) as conn:
            await conn.execute(b"insert into fault_spans (n, event) values (%s, 'start')", (self.n,))
            pressed = False
            if self.n % self.press == 0:
                cur = await conn.execute(b"insert into fault_pressed (n) values (%s) on conflict do nothing",
                                         (self.n,))
                pressed = cur.rowcount == 1
            if self.work and not pressed:
                await asyncio.sleep(self.work)
            await conn.execute(b"insert into fault_spans (n, event) values (%s, 'end')", (self.n,))
        if pressed:
            raise Backpressure(f"job {self.n}: the downstream is overloaded", retry_after=0.05)


class BatchCallbackJob(Job):
    """A batch's callback (issue 26): records its execution and the batch's counts as it read them
    (``fault_echo``, text 'batch')."""

    name = "faults:batch-callback"

    async def handle(self, context: JobContext) -> None:
        await append(context)
        state = await context.batch()
        counts = None if state is None else {"total": state.total, "pending": state.pending,
                                             "succeeded": state.succeeded, "failed": state.failed,
                                             "cancelled": state.cancelled}
        async with await psycopg.AsyncConnection.connect(_ledger_dsn(), autocommit=True) as conn:
            await conn.execute(b"insert into fault_echo (job_id, queue, text, data) values (%s, %s, 'batch', %s)",
                               (context.id, context.queue, Jsonb(counts)))


class ResultAfterCrashJob(Job):
    """Declares a result: its first attempt records itself and then sleeps ``first_sleep`` seconds
    (long enough for the test to kill its worker); a later attempt returns ten times its number."""

    name = "faults:result-after-crash"

    first_sleep: float = 3.0

    async def handle(self, context: JobContext) -> int:
        await append(context)
        if context.attempts == 1:
            await asyncio.sleep(self.first_sleep)
        return 10 * context.attempts
