"""``pgqueue queue:work --processes N``: a supervisor and its worker processes, all real processes.

The jobs (tests/supervisor_jobs.py) leave marks in a folder so the test can see which
process runs what; the supervisor's log lines say which worker processes it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import Client, Job
from tests.cli_support import cli_env, command
from tests.supervisor_jobs import HoldFirstAttempt, Noop, Rendezvous

Conn = psycopg.Connection[Any]
WITHIN = 60.0
STARTED = re.compile(r"worker process (\d+)/(\d+) started \(pid (\d+)\)")


class Supervised:
    """A running ``pgqueue queue:work --processes N``; its stderr is collected line by line."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([*command(), "queue:work", *args], cwd=cwd, env=cli_env(env),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append("<eof>")
            self._changed.notify_all()

    @property
    def log(self) -> str:
        """Everything the supervisor and its workers wrote to stderr so far."""
        with self._changed:
            return "\n".join(self.lines)

    def wait_for(self, found: Callable[[list[str]], Any], what: str, within: float = WITHIN) -> Any:
        """Block until ``found(lines)`` is truthy (woken by each new line); returns its value."""
        with self._changed:
            value = self._changed.wait_for(lambda: found(self.lines) or "<eof>" in self.lines, timeout=within)
            value = found(self.lines)
        if not value:
            pytest.fail(f"supervisor: timed out or ended waiting for {what}:\n{self.log}")
        return value

    def started(self) -> list[tuple[int, int]]:
        """(slot, pid) of every worker process started so far, in order."""
        with self._changed:
            return [(int(m[1]), int(m[3])) for line in self.lines if (m := STARTED.search(line))]

    def finish(self, within: float = WITHIN) -> int:
        """Wait for the supervisor to exit; its exit code."""
        code = self.proc.wait(timeout=within)
        self._reader.join(timeout=within)
        return code

    def kill(self) -> None:
        """Kill the supervisor and, being a test, every worker process it started."""
        for _, pid in self.started():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder


@pytest.fixture
def supervise(tmp_path: Path, marks: Path) -> Iterator[Callable[..., Supervised]]:
    started: list[Supervised] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Supervised:
        s = Supervised(list(args), tmp_path, {"PGQUEUE_TEST_MARKS": str(marks), **(env or {})})
        started.append(s)
        return s

    yield start
    for s in started:  # whatever a failed test left running
        s.kill()


def _poll_until(check: Callable[[], Any], what: str, within: float = WITHIN) -> Any:
    # The database has no event for "the queue is empty": look every 50 ms.
    deadline = time.monotonic() + within
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within:g}s waiting for {what}")
        time.sleep(0.05)
    return value


def _push(dsn: str, jobs: list[Job]) -> None:
    async def dispatch() -> None:
        async with Client(dsn=dsn) as client:
            await client.dispatch_many(jobs)

    asyncio.run(dispatch())


def _live_jobs(conn: Conn) -> int:
    row = conn.execute("select count(*) from pgqueue.jobs").fetchone()
    assert row is not None
    return int(row[0])


def test_two_processes_drain_a_workload_running_side_by_side(
        dsn: str, conn: Conn, supervise: Callable[..., Supervised], marks: Path) -> None:
    # Two rendezvous jobs finish only if two processes run them at once (concurrency 1 each).
    # --prefetch 0: with a buffer, one process could hold both rendezvous jobs while it runs one.
    _push(dsn, [Rendezvous(), Rendezvous(), *(Noop() for _ in range(300))])

    s = supervise("--processes", "2", "--concurrency", "1", "--prefetch", "0", "--queue", "proc", "--stop-when-empty",
                  "--app", "tests.supervisor_jobs", "--dsn", dsn)
    assert s.finish() == 0, s.log
    assert _live_jobs(conn) == 0, s.log
    assert conn.execute("select count(*) from pgqueue.failed_jobs").fetchone() == (0,)
    pids = {pid for _, pid in s.started()}
    assert {slot for slot, _ in s.started()} == {1, 2} and len(pids) == 2, s.log
    assert {p.name for p in marks.iterdir()} == {f"rendezvous-{pid}" for pid in pids}
    processed = [int(n) for n in re.findall(r"worker stopped after \S+ (\d+) reservations processed", s.log)]
    assert len(processed) == 2 and sum(processed) == 302, s.log
    assert "restarting" not in s.log


def test_a_killed_worker_process_is_restarted_and_the_workload_completes(
        dsn: str, conn: Conn, supervise: Callable[..., Supervised], marks: Path) -> None:
    _push(dsn, [HoldFirstAttempt(), *(Noop() for _ in range(200))])

    # A short lease so the killed process's reservation is recovered in seconds.
    s = supervise("--processes", "2", "--concurrency", "2", "--queue", "proc", "--lease", "6",
                  "--app", "tests.supervisor_jobs", "--dsn", dsn)
    holding = _poll_until(lambda: list(marks.glob("holding-*")), "the held job to start")
    victim = int(holding[0].name.removeprefix("holding-"))
    os.kill(victim, signal.SIGKILL)

    # The supervisor notices, logs it and starts a new process in that slot.
    slot = next(slot for slot, pid in s.started() if pid == victim)
    s.wait_for(lambda lines: any(f"worker process {slot} (pid {victim}) died (killed by SIGKILL)" in line
                                 and "restarting it in" in line for line in lines), "the death to be logged")
    s.wait_for(lambda _: [pid for n, pid in s.started() if n == slot and pid != victim], "the restart")

    # Every job completes: the held one on its second attempt, after its lease expired.
    _poll_until(lambda: _live_jobs(conn) == 0, "every job to complete")
    assert conn.execute("select count(*) from pgqueue.failed_jobs").fetchone() == (0,)

    s.proc.send_signal(signal.SIGTERM)
    assert s.finish() == 0, s.log
    assert "forwarding SIGTERM to 2 worker processes" in s.log
    assert len(re.findall(r"worker stopped after", s.log)) == 2, s.log  # both drained, the killed one could not


def test_sigterm_drains_every_worker_process_and_exits_0(
        dsn: str, supervise: Callable[..., Supervised]) -> None:
    s = supervise("--processes", "2", "--queue", "proc", "--app", "tests.supervisor_jobs", "--dsn", dsn)
    s.wait_for(lambda lines: sum("worker started" in line for line in lines) == 2, "both workers to start")
    workers = [pid for _, pid in s.started()]

    s.proc.send_signal(signal.SIGTERM)
    assert s.finish() == 0, s.log
    assert len(re.findall(r"worker stopped after", s.log)) == 2, s.log
    assert "restarting" not in s.log
    for pid in workers:  # no worker outlives its supervisor
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_process_that_cannot_start_makes_the_supervisor_give_up(
        dsn: str, supervise: Callable[..., Supervised]) -> None:
    # The supervisor's own checks pass (it imports the jobs fine); every worker process fails to start.
    s = supervise("--processes", "2", "--queue", "proc", "--app", "tests.supervisor_jobs", "--dsn", dsn,
                  env={"PGQUEUE_TEST_BROKEN_START": "1"})
    assert s.finish() == 1, s.log
    assert "simulated broken deployment" in s.log
    assert re.search(r"pgqueue: error: worker process \d died 5 times in a row within 10s of starting "
                     r"\(last: exit code 2\); the other workers were stopped", s.log), s.log
    assert len(s.started()) >= 5


def _alive(pid: int) -> bool:
    # A dead worker whose new parent (init) has not reaped it yet is a zombie: gone for our purpose.
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the workers follow their supervisor on Linux")
def test_workers_do_not_outlive_a_killed_supervisor(dsn: str, supervise: Callable[..., Supervised]) -> None:
    s = supervise("--processes", "2", "--queue", "proc", "--app", "tests.supervisor_jobs", "--dsn", dsn)
    s.wait_for(lambda lines: sum("worker started" in line for line in lines) == 2, "both workers to start")
    workers = [pid for _, pid in s.started()]

    s.proc.kill()
    s.finish()
    _poll_until(lambda: not any(_alive(pid) for pid in workers), "the orphaned workers to stop")


def test_sigint_is_forwarded_as_sigint_so_the_logs_say_what_the_user_did(
        dsn: str, supervise: Callable[..., Supervised]) -> None:
    # Ctrl-C reaches the supervisor only (the workers have their own process group).
    s = supervise("--processes", "2", "--queue", "proc", "--app", "tests.supervisor_jobs", "--dsn", dsn)
    s.wait_for(lambda lines: sum("worker started" in line for line in lines) == 2, "both workers to start")
    s.proc.send_signal(signal.SIGINT)
    assert s.finish() == 0, s.log
    assert "forwarding SIGINT to 2 worker processes" in s.log
    assert len(re.findall(r"SIGINT: finishing", s.log)) == 2 and "SIGTERM" not in s.log, s.log
