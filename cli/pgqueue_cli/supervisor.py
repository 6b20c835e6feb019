"""``pgqueue queue:work --processes N``: one supervisor, N worker processes.

A worker is one asyncio process: its handlers share one core. The supervisor runs N
ordinary ``pgqueue queue:work`` processes (the same options, ``--processes 1``) so CPU-bound
handlers use N cores. It keeps them alive and stops them together:

- a worker that dies (a crash, ``kill -9``, an exit code other than 0) is started again after
  a backoff (0.25 s, doubling, at most 30 s), and the death is logged; a worker that stayed
  up for ``stable_after`` seconds starts over with the shortest backoff;
- a worker that ends by itself with exit code 0 (``--stop-when-empty``, ``--max-jobs``) is
  done and not restarted; when every worker is done, the supervisor exits 0;
- SIGTERM or SIGINT is forwarded to every worker as it came (both start their graceful drain;
  after a Ctrl-C the workers' logs say SIGINT, not SIGTERM); a second one is forwarded too (the
  workers then cancel their handlers). The supervisor exits 0 if
  every worker drained cleanly;
- a worker that dies ``max_quick_failures`` times in a row within ``stable_after`` seconds of
  its start cannot be kept alive: the supervisor stops the others and exits 1.

Nothing is coordinated between the workers but the database, exactly as for workers on
several hosts. The workers run in their own process group (a terminal's Ctrl-C reaches the
supervisor only, which forwards it once) and ask the kernel to send them SIGTERM should the
supervisor itself die (Linux), so they never outlive it unnoticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

logger = logging.getLogger("pgqueue.supervisor")

# Set in each worker's environment: "<slot>/<processes>" and the supervisor's PID.
WORKER_SLOT_ENV = "PGQUEUE_WORKER_PROCESS"
SUPERVISOR_PID_ENV = "PGQUEUE_SUPERVISOR_PID"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class RestartPolicy:
    """When a dead worker is started again, and when the supervisor gives up."""

    backoff_initial: float = 0.25
    backoff_max: float = 30.0
    stable_after: float = 10.0
    max_quick_failures: int = 5

    def backoff(self, quick_failures: int) -> float:
        """Seconds to wait before the next start, after ``quick_failures`` early deaths in a row."""
        return float(min(self.backoff_max, self.backoff_initial * 2 ** max(0, quick_failures - 1)))


class GaveUp(Exception):
    """A worker process died too often, too early, to be kept alive."""


def describe_exit(code: int) -> str:
    """``exit code 3`` / ``killed by SIGKILL`` for a process's return code."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Supervisor:
    """Runs ``command`` as ``processes`` worker processes until they are done or stopped."""

    def __init__(self, command: Sequence[str], processes: int, *, policy: RestartPolicy | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.command = list(command)
        self.processes = processes
        self.policy = policy or RestartPolicy()
        self.env = dict(os.environ if env is None else env)
        self.restarts = 0
        self._stopping = asyncio.Event()
        self._signals = 0
        self._children: dict[int, asyncio.subprocess.Process] = {}

    # ------------------------------------------------------------------ control
    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Forward a stop to every worker (the signal received, SIGTERM by default: the graceful drain)
        and restart none."""
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            logger.info("pgqueue: supervisor stopping: forwarding %s to %d worker processes (graceful drain)",
                        name, len(self._children))
        else:
            logger.info("pgqueue: supervisor: second stop, forwarding %s again (running handlers are cancelled)",
                        name)
        self._stopping.set()
        for child in self._children.values():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    async def run(self) -> int:
        """Run until every worker is done or stopped; 0 if all ended cleanly, 1 otherwise."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop, sig)
        try:
            results = await asyncio.gather(*(self._keep_alive(slot) for slot in range(1, self.processes + 1)),
                                           return_exceptions=True)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        gave_up = [r for r in results if isinstance(r, GaveUp)]
        for other in results:
            if isinstance(other, BaseException) and not isinstance(other, GaveUp):
                raise other
        if gave_up:
            logger.error("pgqueue: error: %s", gave_up[0])
            return 1
        return 0 if all(r == 0 for r in results) else 1

    # ---------------------------------------------------------------- one slot
    async def _keep_alive(self, slot: int) -> int:
        quick_failures = 0
        while True:
            started = time.monotonic()
            child = await self._start(slot)
            code = await child.wait()
            self._children.pop(slot, None)
            lived = time.monotonic() - started
            if self._stopping.is_set():
                if code != 0:
                    logger.warning("pgqueue: worker process %d (pid %d) ended with %s while stopping",
                                   slot, child.pid, describe_exit(code))
                return code
            if code == 0:
                logger.info("pgqueue: worker process %d (pid %d) finished", slot, child.pid)
                return 0
            quick_failures = quick_failures + 1 if lived < self.policy.stable_after else 1
            if quick_failures >= self.policy.max_quick_failures:
                self.stop()
                raise GaveUp(
                    f"worker process {slot} died {quick_failures} times in a row within "
                    f"{self.policy.stable_after:g}s of starting (last: {describe_exit(code)}); the other workers "
                    f"were stopped. Its own error is above; fix it and start the workers again")
            delay = self.policy.backoff(quick_failures)
            logger.warning("pgqueue: worker process %d (pid %d) died (%s) after %.1fs; restarting it in %gs",
                           slot, child.pid, describe_exit(code), lived, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            if self._stopping.is_set():
                return 0
            self.restarts += 1

    async def _start(self, slot: int) -> asyncio.subprocess.Process:
        env = dict(self.env, **{WORKER_SLOT_ENV: f"{slot}/{self.processes}", SUPERVISOR_PID_ENV: str(os.getpid())})
        # Its own process group: a terminal's Ctrl-C reaches the supervisor alone, which forwards it once.
        child = await asyncio.create_subprocess_exec(*self.command, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                     process_group=0)
        self._children[slot] = child
        logger.info("pgqueue: worker process %d/%d started (pid %d)", slot, self.processes, child.pid)
        if self._stopping.is_set():  # a stop that arrived while it was being started
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
        return child


def worker_command(argv: Sequence[str]) -> list[str]:
    """The command line of one worker process: this command's arguments with ``--processes 1``.

    Click keeps the last value of a repeated option, so appending is enough.
    """
    return [sys.executable, "-m", "pgqueue_cli", *argv, "--processes", "1"]


def follow_supervisor() -> None:
    """In a worker process the supervisor started: receive SIGTERM when the supervisor dies.

    Without this, a supervisor killed with SIGKILL would leave its workers running unseen.
    Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere nothing happens.
    """
    supervisor = os.environ.get(SUPERVISOR_PID_ENV)
    if supervisor is None or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    # The supervisor may have died before the request took effect.
    if str(os.getppid()) != supervisor:
        os.kill(os.getpid(), signal.SIGTERM)
