"""Shared pieces: fresh databases, statistics, worker subprocesses, machine facts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = Path(__file__).resolve().parent / "sql"


def sql(name: str) -> str:
    """A benchmark statement from benchmarks/sql/<name>.sql."""
    return (SQL_DIR / f"{name}.sql").read_text()


# ------------------------------------------------------------------ databases
def database_dsn(admin_dsn: str, dbname: str) -> str:
    """The admin DSN pointed at another database."""
    params = conninfo_to_dict(admin_dsn)
    params["dbname"] = dbname
    return make_conninfo("", **params)


@contextlib.asynccontextmanager
async def fresh_database(admin_dsn: str, label: str) -> AsyncIterator[str]:
    """Create an empty database for one measurement and drop it afterwards (forcefully)."""
    name = f"bench_{label}_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        await conn.execute(f'create database "{name}"')
    try:
        yield database_dsn(admin_dsn, name)
    finally:
        async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
            await conn.execute(f'drop database if exists "{name}" with (force)')


def asyncpg_dsn(dsn: str) -> str:
    """A libpq DSN (key=value or URL) as the postgresql:// URL asyncpg accepts."""
    from urllib.parse import quote

    params = conninfo_to_dict(dsn)
    auth = quote(str(params.get("user", "postgres")), safe="")
    if params.get("password"):
        auth += ":" + quote(str(params["password"]), safe="")
    host, port = params.get("host", "127.0.0.1"), params.get("port", 5432)
    return f"postgresql://{auth}@{host}:{port}/{quote(str(params.get('dbname', 'postgres')), safe='')}"


async def fetch_value(dsn: str, statement: str, params: Sequence[Any] | None = None) -> Any:
    """First column of the first row of an ad-hoc inspection query."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(statement, params)
        row = await cur.fetchone()
    return None if row is None else row[0]


# ----------------------------------------------------------------- statistics
@dataclass
class Series:
    """Repeated measurements of one figure."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def min(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def max(self) -> float:
        return max(self.values) if self.values else float("nan")

    def to_data(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "max": self.max, "values": self.values}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# ------------------------------------------------------------ worker processes
class WorkerProcess:
    """A benchmark worker (``python -m benchmarks.worker``) in its own process, stopped by PID.

    The worker writes one line per event on stdout: ``ready``, ``hit <seq> <time>`` in
    serve mode, and a final ``result <json>``.
    """

    def __init__(self, system: str, dsn: str, mode: str, concurrency: int, variant: str = "default",
                 expect: int = 0, extra: Sequence[str] = ()) -> None:
        from benchmarks.peers import interpreter_for

        # The system's own interpreter: this one, or the venv the harness made for it (peers.py).
        self.interpreter = interpreter_for(system)
        self.args = [self.interpreter.python, "-m", "benchmarks.worker", system, dsn, mode, str(concurrency),
                     "--variant", variant, "--expect", str(expect), *extra]
        self.proc: asyncio.subprocess.Process | None = None
        self.hits: list[tuple[int, float]] = []
        self.hit_event = asyncio.Event()
        self.ready = asyncio.Event()
        self.result: dict[str, Any] | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.args, cwd=self.interpreter.cwd, stdout=asyncio.subprocess.PIPE, stderr=None,
            env=self.interpreter.environment(), limit=2**26,  # a pace result lists every batch
        )
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode().strip()
            if line.startswith("hit "):
                _, seq, at = line.split()
                self.hits.append((int(seq), float(at)))
                self.hit_event.set()
            elif line == "ready":
                self.ready.set()
            elif line.startswith("result "):
                self.result = json.loads(line[len("result "):])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def wait_hits(self, count: int, within: float) -> None:
        """Wait until ``count`` handler starts were reported (serve mode)."""
        deadline = time.monotonic() + within
        while len(self.hits) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"worker {self.pid}: {len(self.hits)} of {count} jobs ran within {within}s")
            self.hit_event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.hit_event.wait(), left)

    async def wait(self, within: float) -> dict[str, Any]:
        """Wait for the worker to exit on its own (drain mode); return its result."""
        assert self.proc is not None
        try:
            await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            await self.stop()
            raise TimeoutError(f"worker {self.pid} {self.args[3:6]} did not finish within {within}s") from None
        if self._reader is not None:
            await self._reader
        if self.proc.returncode != 0 or self.result is None:
            raise RuntimeError(f"worker {self.pid} {self.args[3:6]} exited with {self.proc.returncode}")
        return self.result

    async def stop(self, grace: float = 15.0) -> None:
        """SIGTERM this worker's PID, then SIGKILL it if it has not exited within ``grace``."""
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)


# --------------------------------------------------------------- the machine
def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def git_revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pgqueue", "sql"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out.stdout.strip() + (" (pgqueue/ or sql/ modified in the working tree)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def environment(admin_dsn: str) -> dict[str, Any]:
    """Versions, machine and PostgreSQL settings for the report."""
    import psutil

    settings = ["fsync", "synchronous_commit", "shared_buffers", "work_mem", "max_connections",
                "wal_level", "full_page_writes", "checkpoint_timeout", "max_wal_size", "autovacuum",
                "jit"]
    pg: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        cur = await conn.execute("select version()")
        row = await cur.fetchone()
        pg["version"] = str(row[0]) if row else "?"
        for name in settings:
            cur = await conn.execute("select current_setting(%s)", (name,))
            row = await cur.fetchone()
            pg[name] = str(row[0]) if row else "?"
        commit_ms = await _commit_latency(conn)
    cpu_model = "?"
    with contextlib.suppress(OSError):
        cpuinfo = await asyncio.to_thread(Path("/proc/cpuinfo").read_text)
        for line in cpuinfo.splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "nproc": os.cpu_count(),
        "cpu": cpu_model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "versions": {p: _version(p) for p in ("pgqueue-py", "procrastinate", "pgqueuer", "awa-pg", "chancy",
                                               "asyncpg", "psycopg", "psycopg-pool", "psycopg-binary",
                                               "matplotlib")},
        "pgqueue_revision": git_revision(),
        "postgresql": pg,
        "commit_ms": commit_ms,
    }


async def _commit_latency(conn: psycopg.AsyncConnection[Any], samples: int = 300) -> dict[str, float]:
    """Round trip of the smallest durable commit: an autocommit ``select txid_current()``.

    Taking a transaction id makes the commit write and flush a WAL record (synchronous_commit),
    so this is what every enqueue of one job in its own transaction pays at least; the same
    statement without a commit to flush (``select 1``) is measured for comparison.
    """
    figures: dict[str, list[float]] = {}
    for label, statement in (("commit", "select txid_current()"), ("round_trip", "select 1")):
        for _ in range(20):
            await conn.execute(statement)
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            await conn.execute(statement)
            times.append((time.perf_counter() - started) * 1000)
        figures[label] = times
    return {"commit_p50": percentile(figures["commit"], 50), "commit_p90": percentile(figures["commit"], 90),
            "round_trip_p50": percentile(figures["round_trip"], 50), "samples": samples}
