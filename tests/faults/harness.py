"""Worker processes, bounded waits on database conditions, and the fault report."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import Client, Job, Settings, load_settings
from tests.faults.fault_jobs import LEDGER_DSN_ENV
from tests.faults.ledger import LedgerReport

REPO = Path(__file__).resolve().parents[2]
REPORT_PATH = Path(os.environ.get("PGQUEUE_FAULT_REPORT", REPO / "benchmarks" / "out" / "faults.json"))

# A short lease so that recovery after a crash takes seconds: a job's timeout (1 s) stays
# below lease - lease_margin (3 - 1 s), as dispatch requires.
FAULT_CONNECTION = {"lease": 3, "lease_margin": 1, "timeout": 1, "tries": 25, "backoff": 0.1}


def write_pyproject(folder: Path, connection: dict[str, Any] | None = None, **extra: dict[str, Any]) -> Path:
    """A pyproject.toml with ``[tool.pgqueue.connections.database]`` (and any ``extra`` connections)."""
    tables = {"database": {**FAULT_CONNECTION, **(connection or {})}, **extra}
    lines = []
    for name, table in tables.items():
        lines.append(f"[tool.pgqueue.connections.{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in table.items()]
        lines.append("")
    path = folder / "pyproject.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def fault_settings(dsn: str, pyproject: Path) -> Settings:
    """Settings from the test's pyproject.toml and ``dsn`` only (the environment is ignored)."""
    return load_settings(pyproject, dsn=dsn, environ={})


class WorkerProcess:
    """One ``tests.faults.worker_main`` subprocess; ended by its PID."""

    def __init__(self, index: int, dsn: str, *, ledger_dsn: str, log_dir: Path, pyproject: Path,  # noqa: PLR0913  # a worker process's command line
                 concurrency: int = 10, queues: str = "default", poll_interval: float = 5.0,
                 listen_dsn: str | None = None, stop_when_empty: bool = False, prefetch: int | None = None,
                 imports: Sequence[str] = ()) -> None:
        self.index = index
        self.args = [sys.executable, "-m", "tests.faults.worker_main", "--dsn", dsn, "--pyproject", str(pyproject),
                     "--concurrency", str(concurrency), "--queues", queues, "--poll-interval", str(poll_interval)]
        if listen_dsn:
            self.args += ["--listen-dsn", listen_dsn]
        if stop_when_empty:
            self.args.append("--stop-when-empty")
        if prefetch is not None:
            self.args += ["--prefetch", str(prefetch)]
        for module in imports:
            self.args += ["--import", module]
        self.env = {**os.environ, LEDGER_DSN_ENV: ledger_dsn, "PYTHONUNBUFFERED": "1"}
        self.log_dir = log_dir
        self.generation = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    def start(self) -> WorkerProcess:
        self.generation += 1
        log = self.log_dir / f"worker{self.index}.{self.generation}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            self.process = subprocess.Popen(self.args, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        """The exit code; a worker still running after ``timeout`` seconds fails the test with where
        its tasks are (SIGUSR1 makes worker_main print them) and its log."""
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while "worker_main: tasks (" not in self.log_text() or "worker_main: tasks end" not in self.log_text():
                if time.monotonic() > deadline or not self.alive():
                    break
                time.sleep(0.1)
            raise AssertionError(f"worker {self.index} (pid {self.pid}) still runs {timeout:.0f}s after being "
                                 f"told to stop:\n{self.log_text()[-12000:]}") from None

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def stop_now(self) -> None:
        """SIGKILL by PID if still running, and reap."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)


class WorkerFleet:
    """The worker processes of one test; every one still running is killed at teardown."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.workers: list[WorkerProcess] = []

    def start(self, dsn: str, *, ledger_dsn: str | None = None, pyproject: Path, **options: Any) -> WorkerProcess:
        worker = WorkerProcess(len(self.workers), dsn, ledger_dsn=ledger_dsn or dsn, log_dir=self.log_dir,
                               pyproject=pyproject, **options)
        self.workers.append(worker.start())
        return worker

    def logs(self) -> str:
        return "\n".join(w.log_text() for w in self.workers)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop_now()


async def wait_until(condition: Callable[[], Awaitable[bool]] | Callable[[], bool], *, within: float,
                     what: str, fleet: WorkerFleet | None = None, interval: float = 0.05) -> None:
    """Poll ``condition`` until true; fail naming ``what`` (and showing worker logs) after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            tail = "" if fleet is None else "\n--- worker logs (tail) ---\n" + fleet.logs()[-4000:]
            raise AssertionError(f"timed out after {within:.0f}s waiting until {what}{tail}")
        await asyncio.sleep(interval)


def scalar(dsn: str, statement: str, params: Sequence[Any] | None = None) -> Any:
    """The first column of the first row of an ad-hoc inspection query."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(statement.encode(), params).fetchone()
    return None if row is None else row[0]


async def dispatch(client: Client, jobs: list[Job], batch: int = 1000) -> int:
    """Dispatch ``jobs`` through the Python API in batches; returns how many."""
    for start in range(0, len(jobs), batch):
        await client.dispatch_many(jobs[start:start + batch])
    return len(jobs)


class FaultReport:
    """Rows of the closing table: one per fault test."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, fault: str, injected: int, report: LedgerReport, **extra: Any) -> None:
        self.rows.append({"fault": fault, "injected": injected, **report.as_row(), **extra})

    def table(self) -> str:
        header = ("fault", "injected", "dispatched", "completed", "failed", "lost", "dup acks", "reruns")
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in self.rows:
            lines.append("| " + " | ".join(str(v) for v in (
                row["fault"], row["injected"], row["dispatched"], row["completed"], row["failed"], row["lost"],
                row["duplicate_acks"] + row["stale_acks"], row["reruns"])) + " |")
        return "\n".join(lines)

    def write(self) -> None:
        if not self.rows:
            return
        REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
        REPORT_PATH.write_text(json.dumps(self.rows, indent=2, default=str) + "\n", encoding="utf-8")
