"""Running the real ``pgqueue`` command in a subprocess, for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.helpers import envelope

REPO = Path(__file__).resolve().parent.parent


def command() -> list[str]:
    """The installed ``pgqueue`` console script of this environment (else ``python -m pgqueue_cli``)."""
    script = Path(sys.executable).parent / "pgqueue"
    return [str(script)] if script.exists() else [sys.executable, "-m", "pgqueue_cli"]


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without any configured database, and the repo importable."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGQUEUE_DSN", "DATABASE_URL", "PGQUEUE_EMBEDDED_DIR", "PGQUEUE_DEBUG")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    return env


def pgqueue(*args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 120,
            stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    """Run ``pgqueue ARGS`` and capture its output (working directory ``cwd``, no pyproject there)."""
    return subprocess.run([*command(), *args], cwd=cwd, env=cli_env(env), capture_output=True, text=True,
                          timeout=timeout, stdin=stdin, check=False)


def pgqueue_all(*calls: tuple[str, ...], cwd: Path, env: Mapping[str, str] | None = None,
                timeout: float = 120) -> list[subprocess.CompletedProcess[str]]:
    """Run independent ``pgqueue`` commands side by side (their start-up dominates); results in order."""
    procs = [subprocess.Popen([*command(), *args], cwd=cwd, env=cli_env(env), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True) for args in calls]
    results = []
    for args, proc in zip(calls, procs, strict=True):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        results.append(subprocess.CompletedProcess([*command(), *args], proc.returncode, out, err))
    return results


def record_failure(conn: psycopg.Connection[Any], queue: str = "default", *, name: str = "tests:noop",
                   args: dict[str, Any] | None = None, message: str = "boom") -> tuple[str, str]:
    """A failure record as the worker would store it; returns (failure id, job id)."""
    env = envelope(queue, name=name, args=args)
    row = conn.execute(
        "select pgqueue.record_failure(%s, 3, 'builtins.RuntimeError', %s, %s, 'exception')",
        (Jsonb(env), message, f"Traceback (most recent call last):\nRuntimeError: {message}\n"),
    ).fetchone()
    assert row is not None
    return str(row[0]), env["id"]


def enqueue(conn: psycopg.Connection[Any], queue: str = "default", *, delay: float = 0.0,
            name: str = "tests:noop") -> str:
    """One job put straight into the queue; returns its id."""
    env = envelope(queue, name=name)
    conn.execute("select pgqueue.enqueue(%s, %s)", (Jsonb(env), delay))
    return str(env["id"])


def one_error_line(stderr: str) -> str:
    """The single ``pgqueue: error:`` line of a failed command (and no traceback)."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("pgqueue: error:")]
    assert len(errors) == 1, stderr
    return errors[0]
