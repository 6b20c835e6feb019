"""Shared by the dashboard tests: a seeded database and a dashboard served by uvicorn on a free port."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import Client, Job, JobContext
from tests.cli_support import cli_env, command
from tests.helpers import envelope
from tests.sql_calls import enqueue, expire_lease, fail, reserve, scalar
from tests.worker_support import settings_for

SECRET = "hunter2-very-secret"


class SignUp(Job):
    """A job with a secret arg: the dashboard must mask ``password``."""

    name = "tests.dashboard.sign_up"
    queue = "accounts"
    redact = ("password",)

    email: str
    password: str

    async def handle(self, context: JobContext) -> None:
        raise NotImplementedError


class SetPassword(Job):
    """A unique job keyed by its secret arg: the key ``unique_by`` derives must show it masked."""

    name = "tests.dashboard.set_password"
    queue = "accounts"
    redact = ("password",)
    unique_by = ("password",)

    user: str
    password: str

    async def handle(self, context: JobContext) -> None:
        raise NotImplementedError


class BlockUntilCancelled(Job):
    """Runs until cancelled: sets :data:`BLOCKING` ``started``, then ``cancelled`` when stopped."""

    name = "tests.dashboard.block_until_cancelled"
    queue = "blocking"
    tries = 1

    async def handle(self, context: JobContext) -> None:
        BLOCKING["started"].set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            BLOCKING["cancelled"].set()
            raise


#: Events of :class:`BlockUntilCancelled`, set from the worker's thread; a test replaces them first.
BLOCKING: dict[str, threading.Event] = {"started": threading.Event(), "cancelled": threading.Event()}


class Ping(Job):
    """Does nothing: what a worker reserves in the pause test."""

    name = "tests.dashboard.ping"
    queue = "pings"

    async def handle(self, context: JobContext) -> None:
        return None


@dataclass
class Seeded:
    """What :func:`seed` made: ids by role."""

    ready: list[uuid.UUID] = field(default_factory=list)
    delayed: list[uuid.UUID] = field(default_factory=list)
    reserved: uuid.UUID | None = None
    expired: uuid.UUID | None = None
    failures: list[uuid.UUID] = field(default_factory=list)
    secret_failure: uuid.UUID | None = None


def failure(conn: psycopg.Connection[Any], queue: str, *, name: str = "tests:noop", message: str = "boom",
            reason: str = "exception", args: dict[str, Any] | None = None, tries: int = 3) -> uuid.UUID:
    """Dispatch, reserve and fail one job through the stored functions; returns the failure id."""
    # The highest priority: the reservation takes this job before any other of its queue.
    job_id = enqueue(conn, envelope(queue, name=name, args=args, tries=tries, priority=32000))
    [granted] = [r for r in reserve(conn, [queue], 1) if r["id"] == job_id]
    assert fail(conn, job_id, granted["token"], exception="app.errors.Boom", message=message,
                traceback=f"Traceback (most recent call last):\n  File \"app.py\", line 7\napp.errors.Boom: {message}",
                reason=reason)
    failure_id: uuid.UUID = scalar(conn, "select id from pgqueue.failed_jobs where job_id = %s", (job_id,))
    return failure_id


def seed(dsn: str) -> Seeded:
    """Queues ``emails`` (3 ready, 1 delayed, 1 reserved, 1 expired lease) and ``accounts``; failures of
    both, among them one of :class:`SignUp` whose message quotes its password."""
    made = Seeded()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, queue in (("app:send_email", "emails"), ("app:send_email", "emails"),
                            ("app:send_digest", "emails")):
            made.ready.append(enqueue(conn, envelope(queue, name=name, args={"to": "a@example.com"})))
        made.delayed.append(enqueue(conn, envelope("emails", name="app:send_email"), delay=3600))
        held = enqueue(conn, envelope("reports", name="app:report"))
        made.reserved = held
        reserve(conn, ["reports"], 1, lease=600)
        stale = enqueue(conn, envelope("reports", name="app:report", priority=5))
        made.expired = stale
        reserve(conn, ["reports"], 1, lease=600)
        expire_lease(conn, stale)
        made.failures.append(failure(conn, "emails", name="app:send_email", message="SMTP said 451"))
        made.failures.append(failure(conn, "emails", name="app:send_digest", message="template missing",
                                     reason="failed_by_handler"))
        made.secret_failure = failure(conn, "accounts", name=SignUp.name,
                                      message=f"login refused for password {SECRET}",
                                      args={"email": "ann@example.com", "password": SECRET})
        made.failures.append(made.secret_failure)
    return made


class Served:
    """A dashboard app served by uvicorn in a thread of its own (its own event loop and Client)."""

    def __init__(self, dsn: str, **options: Any) -> None:
        self.dsn = dsn
        self.options = options
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        # Listening before uvicorn runs: a browser that connects early waits in the backlog.
        self.sock.listen(64)
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: Any = None
        self._ready = threading.Event()
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="dashboard-server", daemon=True)

    def _run(self) -> None:
        import uvicorn

        from pgqueue.dashboard import create_app

        async def serve() -> None:
            async with Client(settings=settings_for(self.dsn), pool_size=4) as client:
                app = create_app(client, **self.options)
                config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
                self._server = uvicorn.Server(config)
                self._ready.set()
                await self._server.serve(sockets=[self.sock])

        try:
            asyncio.run(serve())
        except BaseException as exc:
            self._errors.append(exc)
            self._ready.set()

    def __enter__(self) -> Served:
        self._thread.start()
        assert self._ready.wait(30), "the dashboard server did not start"
        assert not self._errors, self._errors
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(30)
        self.sock.close()
        assert not self._errors, self._errors


@contextmanager
def served(dsn: str, **options: Any) -> Iterator[Served]:
    """``with served(dsn, read_only=True) as server: ... server.url``."""
    with Served(dsn, **options) as server:
        yield server


def in_thread(make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine on an event loop of its own thread (the browser tests' thread has Playwright's)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(make()))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-worker")
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the worker did not finish within 60 s"
    if errors:
        raise errors[0]
    return result[0]


def drain(dsn: str, queue: str) -> int:
    """How many jobs a worker of ``queue`` runs before it finds none ready (listen off: no wake-ups)."""
    async def run() -> int:
        async with Client(settings=settings_for(dsn)) as client:
            worker = await client.worker(queues=[queue], concurrency=2, listen=False, maintenance_interval=None,
                                         schedules=False)
            return await worker.run(stop_when_empty=True)
    ran: int = in_thread(run)
    return ran


class BackgroundWorker:
    """A worker of one queue running in a thread with its own event loop, until :meth:`stop`."""

    def __init__(self, dsn: str, queue: str) -> None:
        self.dsn, self.queue = dsn, queue
        self.loop: asyncio.AbstractEventLoop | None = None
        self.worker: Any = None
        self._ready = threading.Event()
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="test-background-worker", daemon=True)

    def _run(self) -> None:
        async def serve() -> None:
            async with Client(settings=settings_for(self.dsn)) as client:
                self.loop = asyncio.get_running_loop()
                # The poll interval is long: only the NOTIFY on pgqueue_cancel stops a handler in time.
                self.worker = await client.worker(queues=[self.queue], concurrency=2, poll_interval=600,
                                                  maintenance_interval=None, heartbeat=False, schedules=False)
                self._ready.set()
                await self.worker.run()

        try:
            asyncio.run(serve())
        except BaseException as exc:
            self._errors.append(exc)
        finally:
            self._ready.set()

    def __enter__(self) -> BackgroundWorker:
        self._thread.start()
        assert self._ready.wait(30), "the worker did not start"
        assert not self._errors, self._errors
        return self

    def stats(self) -> Any:
        return self.worker.stats

    def __exit__(self, *exc: object) -> None:
        if self.loop is not None and self.worker is not None:
            self.loop.call_soon_threadsafe(self.worker.stop)
        self._thread.join(30)
        assert not self._thread.is_alive(), "the worker did not stop"
        assert not self._errors, self._errors


@contextmanager
def command_served(dsn: str, *options: str, cwd: Path) -> Iterator[str]:
    """``pgqueue dashboard --port 0 OPTIONS`` in a subprocess; yields its URL (ends it after)."""
    process = subprocess.Popen([*command(), "dashboard", "--port", "0", "--dsn", dsn, *options], cwd=cwd,
                               env=cli_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert process.stderr is not None
        line = ""
        while "serving" not in line:
            line = process.stderr.readline()
            assert line, "the command ended before serving"
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, line
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        process.terminate()  # the process this helper started, by its own handle
        process.wait(30)
