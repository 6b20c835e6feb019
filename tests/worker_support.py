"""Fixtures and helpers shared by the worker tests (tests/test_worker_*.py).

Nothing here waits on a wall-clock guess: a test waits for an asyncio event, or polls a
condition (usually a database query) until a generous deadline and then fails saying
what it was waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgqueue import Client, Settings, Worker, load_settings
from tests.worker_jobs import HOOKS, LEDGER_DDL, Hook

NO_PYPROJECT = Path("/nonexistent/pyproject.toml")
DEADLINE = 30.0


def settings_for(dsn: str, **database: Any) -> Settings:
    """Settings with only ``dsn`` configured (no pyproject.toml, no environment); keyword
    arguments override fields of the ``database`` connection (lease, lease_margin, ...)."""
    settings = load_settings(NO_PYPROJECT, dsn=dsn, environ={})
    if not database:
        return settings
    connections = dict(settings.connections)
    connections["database"] = replace(connections["database"], **database)
    return replace(settings, connections=connections)


@pytest.fixture
async def client(dsn: str) -> AsyncIterator[Client]:
    """An open Client on the test's own migrated database."""
    q = Client(settings=settings_for(dsn))
    await q.open()
    try:
        yield q
    finally:
        await q.close()


@pytest.fixture
def hooks() -> Iterator[Callable[[str, Hook], str]]:
    """``register(name, hook)`` makes Probe jobs with ``hook=name`` run ``hook``; returns name."""
    names: list[str] = []

    def register(name: str, hook: Hook) -> str:
        HOOKS[name] = hook
        names.append(name)
        return name

    yield register
    for name in names:
        HOOKS.pop(name, None)


class Runs:
    """Workers running in the background of one test; all are stopped at its end."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Worker, asyncio.Task[int]]] = []

    def start(self, worker: Worker, **run: Any) -> asyncio.Task[int]:
        """``worker.run(**run)`` as a task."""
        task = asyncio.create_task(worker.run(**run))
        self.tasks.append((worker, task))
        return task

    async def close(self) -> None:
        for worker, task in self.tasks:
            if not task.done():
                worker.stop(cancel_running=True)
                with contextlib.suppress(BaseException):
                    async with asyncio.timeout(DEADLINE):
                        await task


@pytest.fixture
async def runs() -> AsyncIterator[Runs]:
    """Start workers in the background; whatever still runs is stopped when the test ends."""
    r = Runs()
    try:
        yield r
    finally:
        await r.close()


async def finish(awaitable: Awaitable[Any], what: str, within: float = DEADLINE) -> Any:
    """Await something that must complete; fail the test clearly if it does not within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            return await awaitable
    except TimeoutError:
        pytest.fail(f"timed out after {within:g}s waiting for {what}")


async def wait_event(event: asyncio.Event, what: str, within: float = DEADLINE) -> None:
    """Wait for an event, failing clearly after ``within`` seconds."""
    await finish(event.wait(), what, within)


async def wait_until(check: Callable[[], Any], what: str, within: float = DEADLINE,
                     interval: float = 0.01) -> Any:
    """Poll ``check()`` (sync or async) until it returns something truthy; returns that value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            pytest.fail(f"timed out after {within:g}s waiting for {what}")
        await asyncio.sleep(interval)


async def rows(dsn: str, sql: str, params: Any = None) -> list[dict[str, Any]]:
    """Rows of an ad-hoc inspection query, as dicts."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(sql, params)
        return await cur.fetchall()


async def scalar(dsn: str, sql: str, params: Any = None) -> Any:
    """The first column of the first row of an ad-hoc query."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    return None if row is None else row[0]


async def equals(pending: Awaitable[Any], value: Any) -> bool:
    """Whether the awaited value is ``value`` (a ``wait_until`` check on an ad-hoc query)."""
    return bool(await pending == value)


async def lock_waits(dsn: str) -> int:
    """Sessions of the test database waiting for a lock (pg_stat_activity)."""
    return int(await scalar(dsn, "select count(*) from pg_stat_activity where datname = current_database() "
                                 "and wait_event_type = 'Lock'"))


async def jobs(dsn: str) -> list[dict[str, Any]]:
    """Every live job row (oldest first), with the seconds until it is available."""
    return await rows(dsn, "select id, queue, attempts, max_tries, token, envelope, reserved_at, available_at,"
                           " extract(epoch from available_at - clock_timestamp())::float as due_in"
                           " from pgqueue.jobs order by created_at, id")


async def failures(dsn: str) -> list[dict[str, Any]]:
    """Every failed_jobs row, oldest first."""
    return await rows(dsn, "select * from pgqueue.failed_jobs order by failed_at, id")


async def create_ledger(dsn: str) -> None:
    """The table LedgerJob writes to."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(LEDGER_DDL)


REPO = Path(__file__).resolve().parent.parent


class Spawned:
    """A worker subprocess whose output lines are collected as they arrive."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = asyncio.Event()
        assert proc.stdout is not None and proc.stderr is not None
        self._readers = [asyncio.create_task(self._read(stream)) for stream in (proc.stdout, proc.stderr)]

    @classmethod
    async def start(cls, *argv: str) -> Spawned:
        """Start ``argv`` in the repository root, without the caller's database environment."""
        env = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
        proc = await asyncio.create_subprocess_exec(*argv, cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        return cls(proc)

    async def _read(self, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            self.lines.append(line.decode(errors="replace").rstrip())
            self._changed.set()

    @property
    def output(self) -> str:
        """Everything the process printed so far."""
        return "\n".join(self.lines)

    async def wait_for_line(self, text: str, what: str, within: float = DEADLINE) -> str:
        """The first output line containing ``text``; fails (with the output) after ``within`` seconds."""
        try:
            async with asyncio.timeout(within):
                while True:
                    for line in self.lines:
                        if text in line:
                            return line
                    if self.proc.returncode is not None and all(r.done() for r in self._readers):
                        break
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            pass
        pytest.fail(f"waiting for {what}: no line with {text!r} (exit code {self.proc.returncode});"
                    f" output:\n{self.output}")

    async def exit_code(self, what: str, within: float = DEADLINE) -> int:
        """Wait for the process to exit; fails (with the output) after ``within`` seconds."""
        try:
            async with asyncio.timeout(within):
                code = await self.proc.wait()
                await asyncio.gather(*self._readers)
        except TimeoutError:
            pytest.fail(f"timed out after {within:g}s waiting for {what}; output:\n{self.output}")
        return code

    async def kill(self) -> None:
        """SIGKILL (if still running) and reap."""
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        for reader in self._readers:
            reader.cancel()


@pytest.fixture
async def spawn() -> AsyncIterator[Callable[..., Awaitable[Spawned]]]:
    """``await spawn(*argv)`` starts a subprocess; any still running is killed when the test ends."""
    started: list[Spawned] = []

    async def start(*argv: str) -> Spawned:
        process = await Spawned.start(*argv)
        started.append(process)
        return process

    yield start
    for process in started:
        await process.kill()
