"""Job types for the worker tests (tests/test_worker_*.py) and the worker subprocesses.

In-process tests steer a handler through a *hook*: an async callable the test registers in
:data:`HOOKS` under a name, which the job carries as its ``hook`` arg. The job classes differ
only in their retry settings.

Worker subprocesses (``python -m tests.worker_process`` or ``pgqueue queue:work --app
tests.worker_jobs``) run :class:`LedgerJob`, which records every execution in the table
``test_ledger`` of the job's own database, so a test can follow a process it cannot reach.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable

import psycopg

from pgqueue import Job, JobContext, SyncJobContext

Hook = Callable[["Probe", JobContext], Awaitable[None]]

#: hook name -> what the handler does; tests register and the ``hooks`` fixture clears.
HOOKS: dict[str, Hook] = {}


class Probe(Job):
    """Runs ``HOOKS[hook](job, context)``; the connection's tries and backoff."""

    name = "tests.worker:probe"
    hook: str
    n: int = 0

    async def handle(self, context: JobContext) -> None:
        await HOOKS[self.hook](self, context)


class Flaky(Probe):
    """Three tries with the backoff sequence 0.05 s, 0.1 s (repeating its last value)."""

    name = "tests.worker:flaky"
    tries = 3
    backoff = (0.05, 0.1)


class Retrying(Probe):
    """Three tries, retried at once: for counting attempts without waiting."""

    name = "tests.worker:retrying"
    tries = 3
    backoff = 0.0


class Once(Probe):
    """A single try: any failure is terminal."""

    name = "tests.worker:once"
    tries = 1


class Patient(Probe):
    """Five tries, but a minute between them."""

    name = "tests.worker:patient"
    tries = 5
    backoff = 60.0


class Deadlined(Probe):
    """Five tries a minute apart, not retried after ``deadline`` (epoch seconds)."""

    name = "tests.worker:deadlined"
    tries = 5
    backoff = 60.0
    deadline: float

    def retry_until(self) -> float | None:
        return self.deadline


class NeedsArgs(Job):
    """Takes one required arg; the hook never runs when the stored args do not fit."""

    name = "tests.worker:needs-args"
    hook: str
    count: int

    async def handle(self, context: JobContext) -> None:
        await HOOKS[self.hook](Probe(hook=self.hook, n=self.count), context)


LEDGER_DDL = """
create table if not exists test_ledger (
    n       integer     not null,
    attempt integer     not null,
    token   bigint      not null,
    pid     integer     not null,
    event   text        not null,
    at      timestamptz not null default clock_timestamp()
)
"""


class LedgerJob(Job):
    """Writes ``started`` and ``finished`` rows to ``test_ledger`` in the database at ``dsn``.

    With ``lock`` set, it waits between the two for a shared hold on that advisory lock:
    a test that holds the lock exclusively keeps the handler busy for as long as it likes.
    """

    name = "tests.worker:ledger"
    tries = 20
    backoff = 0.1
    dsn: str
    n: int
    lock: int | None = None

    async def handle(self, context: JobContext) -> None:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            row = (self.n, context.attempts, context.token, os.getpid())
            await conn.execute("insert into test_ledger (n, attempt, token, pid, event)"
                               " values (%s, %s, %s, %s, 'started')", row)
            if self.lock is not None:
                await conn.execute("select pg_advisory_lock_shared(%s)", (self.lock,))
                await conn.execute("select pg_advisory_unlock_shared(%s)", (self.lock,))
            await conn.execute("insert into test_ledger (n, attempt, token, pid, event)"
                               " values (%s, %s, %s, %s, 'finished')", row)


class LedgerOnce(LedgerJob):
    """A :class:`LedgerJob` with one try: a lost try shows as a failure."""

    name = "tests.worker:ledger_once"
    tries = 1


class Exits(Job):
    """Ends its handler with a BaseException that is not an Exception (issue 24, item 6): ``how``
    is ``system_exit`` (SystemExit(3)), ``keyboard_interrupt`` or ``cancelled`` (a CancelledError
    nothing asked for)."""

    name = "tests.worker:exits"
    tries = 1
    how: str

    async def handle(self, context: JobContext) -> None:
        if self.how == "system_exit":
            raise SystemExit(3)
        if self.how == "keyboard_interrupt":
            raise KeyboardInterrupt
        raise asyncio.CancelledError


class SyncExits(Job):
    """A sync handler that calls ``sys.exit(4)`` in its thread."""

    name = "tests.worker:sync_exits"
    tries = 1

    def handle(self, context: SyncJobContext) -> None:  # type: ignore[override]  # a sync handler
        sys.exit(4)
