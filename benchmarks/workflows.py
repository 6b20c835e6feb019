"""Durable workflows beside DBOS Transact (issue 27): the same workflow in both systems.

    uv run --group bench python -m benchmarks.workflows                      # all phases, writes RESULTS.md
    uv run --group bench python -m benchmarks.workflows --workflows 200 --runs 1 --no-write   # a smoke run
    uv run --group bench python -m benchmarks --only workflows               # the section of the suite

The workflow (benchmarks/workflow_worker.py): five steps, each one insert into an effects table in
the step's own transaction — DBOS 3.4's ``SQLAlchemyDatasource.transaction`` (the step's checkpoint
commits with the insert), pgqueue's ``context.transaction(step)`` (the same, fenced by the
reservation's token). Every system runs in one process of its own (``python -m
benchmarks.workflow_worker``), on a fresh database of the machine's PostgreSQL per measurement
(its system tables and the effects table in that one database), dropped afterwards. DBOS polls its
queue every 0.05 s (as the issue measured it; its default is 1 s) and runs sync workflows, its
primary style, one thread each.

Phases, the systems alternating run by run (A B A B):

- **throughput** — N workflows enqueued from the system's client, one per transaction
  (DBOS: ``DBOSClient.enqueue``; pgqueue: ``client.dispatch``), then one worker process at
  concurrency 10 and 50 until every workflow finished (in the database): workflows/s and steps/s
  (5 per workflow) of the drain; per workflow, of the enqueue and the drain: commits
  (``pg_stat_database.xact_commit`` of the database, read once its backends have exited, so that
  they have reported), WAL (the server's ``pg_current_wal_lsn`` diff, and the part that
  ``pg_walinspect`` attributes to the database: records on its blocks and the records of the
  transactions that wrote them) and the server's CPU (``ServerProbe``); statements
  (``pg_stat_statements``) where the extension is loaded, else left out and said so; the worker's
  threads and connections (peak); afterwards every effect exactly once;
- **signal** — an idle worker (concurrency 10), one workflow at a time waiting for a signal; the
  harness, another process, sends it (DBOS: ``DBOSClient.send``; pgqueue: ``client.signal``) a
  random 0.1-0.3 s after the workflow said it waits: send -> the start of the step after the
  wait, p50/p99;
- **sleep** — S workflows put to sleep (a durable sleep of an hour): the worker's threads,
  resident memory, connections and the slots held (DBOS: workflows PENDING, which count against
  their queue's concurrency, so its sleepers' queue has no limit; pgqueue: jobs reserved);
- **kill** — N workflows, the worker SIGKILLed once about 40% of the effects are written, then
  started again until all finished: every effect exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import Series, fresh_database, percentile, sql
from benchmarks.server_cost import ServerProbe
from benchmarks.workflow_worker import QUEUE, SLEEP_QUEUE, dbos_url

log = logging.getLogger("benchmarks")
HERE = Path(__file__).resolve().parent
SYSTEMS = ("pgqueue", "dbos")
LABELS = {"pgqueue": "pgqueue", "dbos": "DBOS Transact"}
STEPS = 5
SECTION = "## Workflows beside DBOS Transact"


@dataclass
class WorkflowSizes:
    """How much the section measures."""

    workflows: int = 1000  # per throughput run and in the kill run
    concurrency: tuple[int, ...] = (10, 50)
    runs: int = 2  # rounds of the throughput phase (A B A B)
    signals: int = 200  # signals per system, one at a time (a p99 of 100 would be their maximum)
    signal_runs: int = 1
    sleepers: int = 500
    sleep_seconds: float = 3600.0
    wakes: int = 50  # short sleeps whose wake-up lateness is measured
    wake_seconds: float = 2.0
    wake_gap: float = 0.1
    kill_at: float = 0.4  # share of the effects written when the worker is killed
    systems: tuple[str, ...] = SYSTEMS
    phases: tuple[str, ...] = ("throughput", "signal", "sleep", "wake", "kill")

    @classmethod
    def quick(cls) -> WorkflowSizes:
        return cls(workflows=200, runs=1, signals=20, sleepers=100, wakes=20)


# ------------------------------------------------------------------ processes
STARTED: list[Process] = []  # every process this harness started, SIGKILLed by PID if still running at the end


class Process:
    """``python -m benchmarks.workflow_worker`` in its own process: its event lines as they come."""

    def __init__(self, system: str, dsn: str, mode: str, *args: str) -> None:
        self.args = [sys.executable, "-m", "benchmarks.workflow_worker", system, dsn, mode, *args]
        self.proc: asyncio.subprocess.Process | None = None
        self.events: dict[str, dict[int, float]] = {}
        self.changed = asyncio.Event()
        self.result: dict[str, Any] | None = None
        self.is_ready = False
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> Process:
        STARTED.append(self)
        self.proc = await asyncio.create_subprocess_exec(
            *self.args, cwd=HERE.parent, stdout=asyncio.subprocess.PIPE, stderr=None,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._reader = asyncio.create_task(self._read())
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            kind, _, rest = raw.decode().strip().partition(" ")
            if kind == "result":
                self.result = json.loads(rest)
            elif kind == "ready":
                self.is_ready = True
            elif kind in ("waiting", "resumed", "asleep"):
                seq, _, at = rest.partition(" ")
                self.events.setdefault(kind, {})[int(seq)] = float(at) if at else time.monotonic()
            self.changed.set()

    async def until(self, condition: Callable[[], bool], within: float, what: str) -> None:
        deadline = time.monotonic() + within
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc is not None and self.proc.returncode is not None):
                raise TimeoutError(f"{self.args[3]} {self.args[5]}: {what} not seen within {within:.0f} s "
                                   f"(exit code {None if self.proc is None else self.proc.returncode})")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))

    def seen(self, kind: str, seq: int) -> bool:
        return seq in self.events.get(kind, {})

    async def ready(self, within: float = 60.0) -> None:
        await self.until(lambda: self.is_ready, within, "ready")

    async def wait(self, within: float) -> dict[str, Any]:
        """Wait for the process to exit on its own; its result."""
        assert self.proc is not None
        try:
            await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            await self.stop()
            raise TimeoutError(f"{self.args[3:6]} did not finish within {within:.0f} s") from None
        if self._reader is not None:
            await self._reader
        if self.proc.returncode != 0 or self.result is None:
            raise RuntimeError(f"{self.args[3:6]} exited with {self.proc.returncode}")
        return self.result

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM this PID, SIGKILL after ``grace``."""
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            await self.kill()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)

    async def kill(self) -> None:
        """SIGKILL this PID (no cleanup of any kind) and reap it."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()


async def run_to_end(system: str, dsn: str, mode: str, *args: str, within: float = 600.0) -> dict[str, Any]:
    process = await Process(system, dsn, mode, *args).start()
    return await process.wait(within)


def threads_of(pid: int) -> int:
    """OS threads of a process (``/proc/<pid>/task``)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# ------------------------------------------------------------------ databases
@dataclass
class Database:
    """A fresh database with one system installed, and the admin connection that watches it."""

    system: str
    dsn: str
    name: str
    admin: psycopg.AsyncConnection[Any]
    walinspect: bool = False
    statements: bool = False

    async def counters(self) -> dict[str, Any]:
        """The database's commits, rollbacks and rows written, and the WAL position (once its backends
        have exited: a backend reports its counters when it goes idle or exits)."""
        await self.quiet()
        cur = await self.admin.execute(sql("workflow_db_counters"), (self.name,))
        row = await cur.fetchone()
        assert row is not None
        counters = {"commits": int(row[0]), "rollbacks": int(row[1]), "rows": int(row[2]), "lsn": str(row[3])}
        if self.statements:
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                cur = await conn.execute(sql("workflow_statements"))
                row = await cur.fetchone()
                counters["statements"] = int(row[0]) if row and row[0] is not None else 0
        return counters

    async def connections(self) -> dict[str, int]:
        cur = await self.admin.execute(sql("workflow_connections"), (self.name,))
        return {str(state): int(n) for state, n in await cur.fetchall()}

    async def quiet(self, within: float = 30.0) -> None:
        """Wait until no backend is connected to the database."""
        deadline = time.monotonic() + within
        while sum((await self.connections()).values()) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # the server's view, polled: no event says a backend has gone

    async def wal(self, start: str, end: str) -> dict[str, float]:
        """WAL bytes between two positions: the server's, and what pg_walinspect attributes to this database."""
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cur = await conn.execute("select pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::float8", (end, start))
            row = await cur.fetchone()
            figures = {"server_bytes": float(row[0]) if row else float("nan"), "database_bytes": float("nan")}
            if self.walinspect:
                try:
                    cur = await conn.execute(sql("workflow_wal_of_database"), (start, end))
                    row = await cur.fetchone()
                    if row is not None:
                        figures["database_bytes"] = float(row[0])
                        figures["database_commits"] = float(row[1])
                        figures["database_fpi_bytes"] = float(row[2])
                except psycopg.Error as exc:  # e.g. the segments recycled already
                    log.warning("pg_walinspect could not read %s..%s: %s", start, end, exc)
        return figures

    async def value(self, statement: str) -> Any:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cur = await conn.execute(sql(statement))
            row = await cur.fetchone()
        return None if row is None else row[0]

    async def effects(self) -> dict[str, int]:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cur = await conn.execute(sql("workflow_effects_check"))
            row = await cur.fetchone()
        assert row is not None
        return {"rows": int(row[0]), "distinct": int(row[1]), "twice": int(row[2])}

    async def states(self) -> dict[str, int]:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cur = await conn.execute(sql(f"workflow_{self.system}_states"))
            return {str(state): int(n) for state, n in await cur.fetchall()}


@contextlib.asynccontextmanager
async def installed(admin_dsn: str, system: str, keep_wal: bool = False) -> AsyncIterator[Database]:
    """A fresh database with ``system`` installed (its own tooling, in its own process) and the effects table;
    with ``keep_wal``, a temporary replication slot that keeps the WAL written from then on, until the end."""
    async with fresh_database(admin_dsn, f"wf_{system}") as dsn:
        name = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
        async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as admin:
            db = Database(system, dsn, name, admin)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute(sql("workflow_effects_table"))
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("create extension if not exists pg_walinspect")
                    db.walinspect = True
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("create extension if not exists pg_stat_statements")
                    await conn.execute("select pg_stat_statements_reset()")
                    db.statements = True
            await run_to_end(system, dsn, "install")
            slot = f"{name}_wal"
            if keep_wal and db.walinspect:
                await admin.execute(sql("workflow_wal_slot"), (slot,))
            try:
                yield db
            finally:
                if keep_wal and db.walinspect:
                    await admin.execute(sql("workflow_wal_slot_drop"), (slot,))


# ------------------------------------------------------------------ phases
async def throughput(admin_dsn: str, system: str, sizes: WorkflowSizes, concurrency: int) -> dict[str, Any]:
    """Enqueue N workflows, then drain them with one worker at ``concurrency``."""
    n = sizes.workflows
    async with installed(admin_dsn, system, keep_wal=True) as db:
        before = await db.counters()
        enqueued = await run_to_end(system, db.dsn, "enqueue", "--workflows", str(n))
        middle = await db.counters()
        peak = {"threads": 0, "connections": 0}
        async with ServerProbe(admin_dsn, db.dsn) as probe:
            worker = await Process(system, db.dsn, "drain", "--workflows", str(n),
                                   "--concurrency", str(concurrency)).start()
            sampling = asyncio.create_task(_peaks(db, worker, peak))
            try:
                drained = await worker.wait(600 + n)
            finally:
                sampling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampling
        after = await db.counters()
        server = await probe.figures(n)
        effects = await db.effects()
        states = await db.states()
        wal_enqueue = await db.wal(before["lsn"], middle["lsn"])
        wal_drain = await db.wal(middle["lsn"], after["lsn"])
    rate = n / drained["elapsed"]
    figures: dict[str, Any] = {
        "workflows_per_s": rate, "steps_per_s": STEPS * rate, "drain_s": drained["elapsed"],
        "enqueue_per_s": n / enqueued["elapsed"],
        "commits_enqueue": (middle["commits"] - before["commits"]) / n,
        "commits_drain": (after["commits"] - middle["commits"]) / n,
        "rollbacks_drain": (after["rollbacks"] - middle["rollbacks"]) / n,
        "rows_written": (after["rows"] - before["rows"]) / n,
        "wal_server_enqueue": wal_enqueue["server_bytes"] / n, "wal_server_drain": wal_drain["server_bytes"] / n,
        "wal_db_enqueue": wal_enqueue["database_bytes"] / n, "wal_db_drain": wal_drain["database_bytes"] / n,
        "wal_fpi_enqueue": wal_enqueue.get("database_fpi_bytes", float("nan")) / n,
        "wal_fpi_drain": wal_drain.get("database_fpi_bytes", float("nan")) / n,
        "wal_commits_enqueue": wal_enqueue.get("database_commits", float("nan")) / n,
        "wal_commits_drain": wal_drain.get("database_commits", float("nan")) / n,
        "server_cpu_us": server["server_cpu_us_per_job"],
        "threads_peak": peak["threads"], "connections_peak": peak["connections"],
        "effects": effects, "states": states,
        "exactly_once": effects == {"rows": STEPS * n, "distinct": STEPS * n, "twice": 0},
        "load": os.getloadavg()[0],
    }
    if "statements" in before:
        figures["statements_enqueue"] = (middle["statements"] - before["statements"]) / n
        figures["statements_drain"] = (after["statements"] - middle["statements"]) / n
    return figures


async def _peaks(db: Database, worker: Process, peak: dict[str, int]) -> None:
    while True:
        peak["threads"] = max(peak["threads"], threads_of(worker.pid))
        peak["connections"] = max(peak["connections"], sum((await db.connections()).values()))
        await asyncio.sleep(0.2)


class Sender:
    """The harness's client of one system (another process than the worker's): dispatch and signal."""

    def __init__(self, system: str, dsn: str) -> None:
        self.system = system
        self.dsn = dsn
        self._client: Any = None
        self._ids: dict[int, str] = {}

    async def __aenter__(self) -> Sender:
        if self.system == "dbos":
            from dbos import DBOSClient

            self._client = DBOSClient(system_database_url=dbos_url(self.dsn))
        else:
            from pgqueue import Client

            self._client = await Client(self.dsn).__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.system == "dbos":
            self._client.destroy()
        else:
            await self._client.__aexit__(None, None, None)

    async def start(self, workflow: str, seq: int, seconds: float = 0.0) -> None:
        """Dispatch one ``signalled`` or ``sleeper`` workflow numbered ``seq``."""
        if self.system == "dbos":
            name = "bench_signalled" if workflow == "signalled" else "bench_sleeper"
            queue = QUEUE if workflow == "signalled" else SLEEP_QUEUE
            args = (seq,) if workflow == "signalled" else (seq, seconds)
            handle = self._client.enqueue({"workflow_name": name, "queue_name": queue}, *args)
            self._ids[seq] = handle.get_workflow_id()
        else:
            from benchmarks.workflow_worker import pgqueue_workflows

            flows = pgqueue_workflows()
            call = (flows["signalled"](seq=seq) if workflow == "signalled"
                    else flows["sleeper"](seq=seq, seconds=seconds))
            handle = await self._client.dispatch(call)
            self._ids[seq] = str(handle.id)

    async def signal(self, seq: int) -> None:
        if self.system == "dbos":
            self._client.send(self._ids[seq], {"by": "bench"}, "approved")
        else:
            await self._client.signal(self._ids[seq], "approved", {"by": "bench"})


async def signal_latency(admin_dsn: str, system: str, sizes: WorkflowSizes) -> dict[str, Any]:
    """One workflow at a time waits for a signal; send -> the step after the wait starts, in ms."""
    latencies: list[float] = []
    async with installed(admin_dsn, system) as db:
        worker = await Process(system, db.dsn, "serve", "--concurrency", "10").start()
        try:
            await worker.ready()
            async with Sender(system, db.dsn) as sender:
                for seq in range(sizes.signals + 3):  # the first 3 warm up (connections, statements)
                    await sender.start("signalled", seq)
                    await worker.until(functools.partial(worker.seen, "waiting", seq), 60, f"waiting {seq}")
                    await asyncio.sleep(random.uniform(0.1, 0.3))
                    sent = time.monotonic()
                    await sender.signal(seq)
                    await worker.until(functools.partial(worker.seen, "resumed", seq), 60, f"resumed {seq}")
                    if seq >= 3:
                        latencies.append(1000 * (worker.events["resumed"][seq] - sent))
                await db_settled(db, sizes.signals + 3)
        finally:
            await worker.stop()
        effects = await db.effects()
    return {"p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99),
            "max_ms": max(latencies), "signals": len(latencies),
            "exactly_once": effects == {"rows": sizes.signals + 3, "distinct": sizes.signals + 3, "twice": 0},
            "load": os.getloadavg()[0]}


async def db_settled(db: Database, workflows: int, within: float = 60.0) -> None:
    """Wait until the database holds ``workflows`` effect rows and no unfinished workflow."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if (await db.effects())["rows"] >= workflows and not await db.value(f"workflow_{db.system}_unfinished"):
            return
        await asyncio.sleep(0.05)


async def sleeping(admin_dsn: str, system: str, sizes: WorkflowSizes) -> dict[str, Any]:
    """S workflows asleep: what the worker process and the database hold for them."""
    s = sizes.sleepers
    async with installed(admin_dsn, system) as db:
        worker = await Process(system, db.dsn, "serve", "--concurrency", "10").start()
        try:
            await worker.ready()
            await asyncio.sleep(1.0)
            idle = {"threads": threads_of(worker.pid), "rss_mib": rss_mib(worker.pid),
                    "connections": sum((await db.connections()).values())}
            async with Sender(system, db.dsn) as sender:
                for seq in range(s):
                    await sender.start("sleeper", seq, sizes.sleep_seconds)
            await worker.until(lambda: len(worker.events.get("asleep", {})) >= s, 120 + s / 5, f"{s} asleep")
            # Until the workflows held by the worker stop changing (the last attempts ending).
            held, previous = await db.value(f"workflow_{system}_held"), -1
            while held != previous:
                await asyncio.sleep(1.0)
                held, previous = await db.value(f"workflow_{system}_held"), held
            connections = await db.connections()
            asleep = {"threads": threads_of(worker.pid), "rss_mib": rss_mib(worker.pid),
                      "connections": sum(connections.values()), "slots": int(held),
                      # Running a statement or inside a transaction: what a sleeper would hold.
                      "connections_busy": sum(n for state, n in connections.items() if state != "idle")}
            states = await db.states()
        finally:
            await worker.stop()
    return {"sleepers": s, "idle": idle, "asleep": asleep, "states": states, "load": os.getloadavg()[0]}


async def wake_lateness(admin_dsn: str, system: str, sizes: WorkflowSizes) -> dict[str, Any]:
    """Workflows asleep for ``wake_seconds``, started ``wake_gap`` apart: how late each one's next step starts."""
    late: list[float] = []
    count = sizes.wakes
    async with installed(admin_dsn, system) as db:
        worker = await Process(system, db.dsn, "serve", "--concurrency", "10").start()
        try:
            await worker.ready()
            async with Sender(system, db.dsn) as sender:
                for seq in range(count):
                    await sender.start("sleeper", seq, sizes.wake_seconds)
                    await asyncio.sleep(sizes.wake_gap)
            await worker.until(lambda: len(worker.events.get("resumed", {})) >= count,
                               60 + count * sizes.wake_gap + sizes.wake_seconds, f"{count} woken")
            await db_settled(db, count)
        finally:
            await worker.stop()
    for seq, woke in worker.events["resumed"].items():
        # From the step before the sleep (its start, just before its checkpoint and the sleep's call).
        late.append(1000 * (woke - worker.events["asleep"][seq] - sizes.wake_seconds))
    return {"p50_ms": percentile(late, 50), "p99_ms": percentile(late, 99), "max_ms": max(late),
            "wakes": len(late), "load": os.getloadavg()[0]}


async def killed(admin_dsn: str, system: str, sizes: WorkflowSizes) -> dict[str, Any]:
    """N workflows; the worker SIGKILLed at ``kill_at`` of the effects, started again until all finished."""
    n = sizes.workflows
    async with installed(admin_dsn, system) as db:
        await run_to_end(system, db.dsn, "enqueue", "--workflows", str(n))
        worker = await Process(system, db.dsn, "drain", "--workflows", str(n), "--concurrency", "10").start()
        written = 0
        while written < sizes.kill_at * STEPS * n:
            await asyncio.sleep(0.05)
            written = (await db.effects())["rows"]
        await worker.kill()
        killed_at = time.monotonic()
        at_kill = (await db.effects())["rows"]
        await db.quiet()
        again = await Process(system, db.dsn, "drain", "--workflows", str(n), "--concurrency", "10",
                              "--expect", "0").start()
        await again.wait(600 + n)
        after_kill = time.monotonic() - killed_at
        effects = await db.effects()
        states = await db.states()
    return {"effects_at_kill": at_kill, "effects": effects, "states": states, "seconds_after_kill": after_kill,
            "exactly_once": effects == {"rows": STEPS * n, "distinct": STEPS * n, "twice": 0},
            "load": os.getloadavg()[0]}


# ------------------------------------------------------------------ the run
def _add(store: dict[str, Any], key: str, figures: dict[str, Any]) -> None:
    """Numbers into Series (one value a run); the rest kept as the last run's."""
    for name, value in figures.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            store.setdefault(key, {}).setdefault(name, Series()).add(float(value))
        else:
            store.setdefault(key, {})[name] = value


async def run_workflows(admin_dsn: str, sizes: WorkflowSizes, results: dict[str, Any],
                        key: str = "workflows") -> None:
    """Every phase, systems interleaved; figures into ``results[key]``."""
    out: dict[str, Any] = {"sizes": dataclasses.asdict(sizes), "load_start": os.getloadavg()[0],
                           "dbos_version": _version("dbos"), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    failures: list[str] = []
    results[key] = out

    async def attempt(label: str, phase: Any) -> dict[str, Any] | None:
        log.info("workflows: %s (load %.1f)", label, os.getloadavg()[0])
        try:
            figures: dict[str, Any] = await phase
            return figures
        except Exception as exc:  # a failed case is reported, the others still run
            log.exception("workflows: %s failed", label)
            failures.append(f"{label}: {exc!r}")
            return None

    plan: list[tuple[str, str, Callable[[], Any], bool]] = []  # (phase, key, measurement, several runs)
    if "throughput" in sizes.phases:
        plan += [("throughput", f"{system} c{concurrency}",
                  functools.partial(throughput, admin_dsn, system, sizes, concurrency), True)
                 for concurrency in sizes.concurrency for _ in range(sizes.runs) for system in sizes.systems]
    if "signal" in sizes.phases:
        plan += [("signal", system, functools.partial(signal_latency, admin_dsn, system, sizes), True)
                 for _ in range(sizes.signal_runs) for system in sizes.systems]
    plan += [(phase, system, functools.partial(measure, admin_dsn, system, sizes), False)
             for phase, measure in (("sleep", sleeping), ("wake", wake_lateness), ("kill", killed))
             if phase in sizes.phases
             for system in sizes.systems]
    try:
        for phase, case, measure, repeated in plan:
            figures = await attempt(f"{phase} {case}", measure())
            if figures is None:
                continue
            if repeated:
                _add(out.setdefault(phase, {}), case, figures)
            else:
                out.setdefault(phase, {})[case] = figures
    finally:
        for process in STARTED:
            if process.proc is not None and process.proc.returncode is None:
                await process.kill()
        STARTED.clear()
    out["failures"] = failures
    out["load_end"] = os.getloadavg()[0]
    out["statements_note"] = ("" if _any(out, "statements_drain") else
                              "pg_stat_statements is not in this server's shared_preload_libraries: statements "
                              "per workflow are not measured here (`--statements-server` measures them on a "
                              "server the harness starts, below when it ran)")


def _any(out: dict[str, Any], figure: str) -> bool:
    return any(figure in case for case in out.get("throughput", {}).values())


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


# ------------------------------------------------------------------ report
def _m(series: Any, digits: int = 0) -> str:
    """A Series (as data) as 'median (min-max)', or a plain number."""
    if series is None:
        return "-"
    if isinstance(series, dict):
        values = series.get("values", [])
        med = series["median"]
        text = f"{med:,.{digits}f}"
        if len(values) > 1:
            text += f" ({series['min']:,.{digits}f}-{series['max']:,.{digits}f})"
        return text
    return f"{float(series):,.{digits}f}"


def _med(series: Any) -> float:
    if isinstance(series, dict):
        return float(series.get("median", float("nan")))
    return float("nan") if series is None else float(series)


def _ratio(a: Any, b: Any) -> str:
    x, y = _med(a), _med(b)
    return "-" if math.isnan(x) or math.isnan(y) or not y else f"{x / y:.1f}x"


def report(results: dict[str, Any]) -> list[str]:
    """The section of RESULTS.md (nothing when the section did not run)."""
    w = results.get("workflows")
    if not w:
        return []
    sizes = w["sizes"]
    lines = [
        SECTION, "",
        f"`{w.get('command', 'uv run --group bench python -m benchmarks.workflows')}` ({w.get('started', '?')}; "
        f"DBOS {w.get('dbos_version', '?')}; load average {w.get('load_start', 0):.1f} at the start, "
        f"{w.get('load_end', 0):.1f} at the end, on the shared 2-core machine). The same workflow in both "
        "systems (benchmarks/workflow_worker.py): five steps, each one insert into an effects table in the "
        "step's own transaction with its checkpoint (DBOS: `SQLAlchemyDatasource.transaction`, SERIALIZABLE, "
        "its default; pgqueue: `context.transaction(step)`), one worker process per system, a fresh database "
        "per measurement; DBOS sync workflows, queue polling 0.05 s (its default: 1 s). Systems alternate run "
        "by run; median (min-max) of the runs.", "",
    ]
    for part in (_throughput_lines, _signal_lines, _sleep_lines, _wake_lines, _kill_lines):
        lines += part(w, sizes)
    lines += _statements_lines(results.get("workflows_statements"))
    lines += _goal_lines(w, sizes)
    lines += NOTES
    if w.get("failures"):
        lines += ["Failed cases: " + "; ".join(w["failures"]), ""]
    return lines


NOTES = [
    "Reading these figures:", "",
    "- Both systems run one worker process, and both are bound by that process's CPU on this shared 2-core "
    "machine (the load average beside each figure is the machine's, mostly other sessions' tests): a pgqueue "
    "step is one round trip (psycopg's pipeline mode: BEGIN and the block's mark, the insert, the fenced "
    "checkpoint and COMMIT sent together; the attempt's first step one more, reading its recorded steps), a "
    "DBOS step about ten statements (its SQLAlchemy pool's ping and reset, the "
    "SERIALIZABLE transaction, the output row and an ownership read, the step bookkeeping in the system "
    "tables). On a quieter machine both go faster; the ratio is the figure to compare, measured side by side.",
    "- Exactly once: DBOS 3.4's `SQLAlchemyDatasource` transactions also commit the step's output row with "
    "the write (a unique key on workflow and step, and a check that the process still owns the workflow), so "
    "in the kill phase both systems wrote every effect once. pgqueue's block commits under the reservation's "
    "fencing token, checked in the same transaction (`pgqueue.workflow_checkpoint`); effects outside "
    "`context.transaction()` are at least once in both.",
    "- After a SIGKILL, DBOS recovers its workflows as soon as the process starts again (the same executor id, "
    "`local`, owns them); pgqueue's restarted worker takes the killed one's workflows once their leases expire "
    "(`lease`, default 90 s; the chaos tests run with 4 s): the kill phase's time after the kill is mostly that.",
    "- A sleeping DBOS sync workflow is a thread in `time.sleep` and a PENDING row counted against its queue's "
    "concurrency (its sleepers' queue here has no limit; with `worker_concurrency=10`, ten sleepers would "
    "fill that queue); a sleeping pgqueue workflow is a row with a wake time: no thread, no lease, no slot. "
    "Neither holds a connection per sleeper (the busy ones counted are what was running at the sample).",
    "",
]


def _goal_lines(w: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    """Issue 27's goals against this run's figures."""
    rows: list[str] = []

    def row(goal: str, ours: str, theirs: str, met: bool | None) -> None:
        rows.append(f"| {goal} | {ours} | {theirs} | {'-' if met is None else 'yes' if met else '**no**'} |")

    tp = w.get("throughput", {})
    for concurrency in sizes["concurrency"]:
        a, b = tp.get(f"pgqueue c{concurrency}"), tp.get(f"dbos c{concurrency}")
        if a and b:
            x, y = _med(a["workflows_per_s"]), _med(b["workflows_per_s"])
            row(f"workflows/s at concurrency {concurrency}: >= 10x DBOS", f"{x:,.1f} ({x / y:.1f}x)",
                f"{y:,.1f}", x >= 10 * y)
            wa = _med(a["wal_db_enqueue"]) + _med(a["wal_db_drain"])
            wb = _med(b["wal_db_enqueue"]) + _med(b["wal_db_drain"])
            if not (math.isnan(wa) or math.isnan(wb)):
                row(f"WAL per workflow at concurrency {concurrency}: <= half of DBOS's", f"{wa / 1024:.1f} KB",
                    f"{wb / 1024:.1f} KB", wa <= wb / 2)
                fa = wa - _med(a.get("wal_fpi_enqueue")) - _med(a.get("wal_fpi_drain"))
                fb = wb - _med(b.get("wal_fpi_enqueue")) - _med(b.get("wal_fpi_drain"))
                if not (math.isnan(fa) or math.isnan(fb)):
                    row(f"... without full-page images (checkpoint-dependent) at concurrency {concurrency}",
                        f"{fa / 1024:.1f} KB", f"{fb / 1024:.1f} KB", fa <= fb / 2)
    sig = w.get("signal", {})
    if "pgqueue" in sig and "dbos" in sig:
        x, y = _med(sig["pgqueue"]["p99_ms"]), _med(sig["dbos"]["p99_ms"])
        row("signal -> resume p99: no worse than DBOS's", f"{x:.1f} ms", f"{y:.1f} ms", x <= y)
    sl = w.get("sleep", {})
    if "pgqueue" in sl and "dbos" in sl:
        a, b = sl["pgqueue"], sl["dbos"]
        grown = a["asleep"]["threads"] - a["idle"]["threads"]
        # The sleeper's first step (announce) is a sync function: asyncio.to_thread runs it on the
        # default executor, whose threads (at most min(32, CPUs + 4)) stay idle afterwards, shared by
        # every workflow; a thread per sleeper would be `sleepers` more.
        shared = min(32, (os.cpu_count() or 1) + 4)
        row(f"{sizes['sleepers']} sleeping workflows: no thread, connection or slot each (threads: at most "
            f"the {shared} of the default executor, which the sync announce step used)",
            f"threads +{grown}, busy connections {a['asleep'].get('connections_busy', '?')}, "
            f"slots {a['asleep']['slots']}",
            f"threads +{b['asleep']['threads'] - b['idle']['threads']}, busy connections "
            f"{b['asleep'].get('connections_busy', '?')}, slots {b['asleep']['slots']}",
            grown <= shared and a["asleep"].get("connections_busy") == 0 and a["asleep"]["slots"] == 0)
    kl = w.get("kill", {})
    if kl:
        row("after a SIGKILL mid-run, every effect exactly once", "yes" if kl.get("pgqueue", {}).get("exactly_once")
            else "no", "yes" if kl.get("dbos", {}).get("exactly_once") else "no",
            bool(kl.get("pgqueue", {}).get("exactly_once")))
    if not rows:
        return []
    return ["**Issue 27's goals, this run:**", "", "| goal | pgqueue | DBOS Transact | met |", "|---|---|---|---|",
            *rows, ""]


def _statements_lines(st: dict[str, Any] | None) -> list[str]:
    """Statements per workflow, from the run on a server of the harness's own (``--statements-server``)."""
    if not st or not st.get("throughput"):
        return []
    sizes = st["sizes"]
    lines = [f"**Statements per workflow** (`{st.get('command', '?')}`: PostgreSQL "
             f"{st.get('server_version', '?')} started by the harness with `shared_preload_libraries = "
             "pg_stat_statements`, which the machine's server does not load; top-level statements the clients "
             "sent, BEGIN and COMMIT included, from `pg_stat_statements.calls`; "
             f"{sizes['workflows']:,} workflows at concurrency {', '.join(map(str, sizes['concurrency']))}):", "",
             "| system | concurrency | statements/wf (enqueue + drain) | durable commits/wf | load |",
             "|---|---|---|---|---|"]
    for case, c in st["throughput"].items():
        system, concurrency = case.split(" c")
        if "statements_drain" not in c:
            continue
        total = _med(c["statements_enqueue"]) + _med(c["statements_drain"])
        durable = _med(c.get("wal_commits_enqueue")) + _med(c.get("wal_commits_drain"))
        lines.append(f"| {LABELS[system]} | {concurrency} | **{total:.1f}** ({_med(c['statements_enqueue']):.1f} + "
                     f"{_med(c['statements_drain']):.1f}) | {durable:.1f} | {_m(c['load'], 1)} |")
    return [*lines, ""]


def _throughput_lines(w: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    tp = w.get("throughput", {})
    if tp:
        lines += [f"**Throughput**: {sizes['workflows']:,} workflows enqueued from the system's client, one per "
                  "transaction, then drained by one worker process. Per workflow, enqueue + drain: durable commits "
                  "(commit records in the database's WAL), transactions (`pg_stat_database` commits and rollbacks, "
                  "read-only ones too: polls, pool pings), WAL of the database (`pg_walinspect`: records on its "
                  "blocks and all records of the transactions that wrote them; beside it the server's whole WAL, "
                  "which also counts other sessions' writes on this shared server) and the server's CPU.", "",
                  "| system | concurrency | workflows/s | steps/s | pgqueue / DBOS | durable commits/wf "
                  "| transactions/wf | WAL/wf (database) | of which full-page images | WAL/wf (server) "
                  "| server CPU µs/wf | threads (peak) | connections (peak) | every effect once | load |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for concurrency in sizes["concurrency"]:
            for system in sizes["systems"]:
                c = tp.get(f"{system} c{concurrency}")
                if not c:
                    continue
                other = tp.get(f"dbos c{concurrency}")
                ratio = _ratio(c["workflows_per_s"], other["workflows_per_s"]) if system == "pgqueue" and other else ""
                durable = _med(c.get("wal_commits_enqueue")) + _med(c.get("wal_commits_drain"))
                transactions = sum(_med(c[k]) for k in ("commits_enqueue", "commits_drain", "rollbacks_drain"))
                wal_db = _med(c["wal_db_enqueue"]) + _med(c["wal_db_drain"])
                wal_server = _med(c["wal_server_enqueue"]) + _med(c["wal_server_drain"])
                fpi = _med(c.get("wal_fpi_enqueue")) + _med(c.get("wal_fpi_drain"))
                lines.append(
                    f"| {LABELS[system]} | {concurrency} | **{_m(c['workflows_per_s'], 1)}** | "
                    f"{_m(c['steps_per_s'])} | {ratio} | **{durable:.1f}** ({_med(c.get('wal_commits_enqueue')):.1f}"
                    f" + {_med(c.get('wal_commits_drain')):.1f}) | {transactions:.1f} | **{wal_db / 1024:.1f} KB** "
                    f"| {fpi / 1024:.1f} KB | {wal_server / 1024:.1f} KB | {_m(c['server_cpu_us'])} | "
                    f"{_m(c['threads_peak'])} | "
                    f"{_m(c['connections_peak'])} | "
                    f"{'yes' if c.get('exactly_once') else '**NO** ' + json.dumps(c.get('effects'))} | "
                    f"{_m(c['load'], 1)} |")
        lines.append("")
        if w.get("statements_note"):
            lines += [f"Statements: {w['statements_note']}.", ""]
    return lines


def _signal_lines(w: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    sig = w.get("signal", {})
    if sig:
        lines += [f"**Signal -> resume** ({sizes['signals']} signals a system, one at a time, to a workflow "
                  "waiting for it, sent by the harness's client 0.1-0.3 s after the workflow said it waits; "
                  "from just before the send call to the start of the step after the wait, ms):", "",
                  "| system | p50 | p99 | max | load |", "|---|---|---|---|---|"]
        for system in sizes["systems"]:
            if system in sig:
                s = sig[system]
                lines.append(f"| {LABELS[system]} | **{_m(s['p50_ms'], 1)}** | **{_m(s['p99_ms'], 1)}** | "
                             f"{_m(s['max_ms'], 1)} | {_m(s['load'], 1)} |")
        lines.append("")
    return lines


def _sleep_lines(w: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    sl = w.get("sleep", {})
    if sl:
        lines += [f"**Sleeping workflows** ({sizes['sleepers']} workflows in a durable sleep of an hour; the "
                  "worker's OS threads (`/proc/<pid>/task`), resident memory and connections "
                  "(`pg_stat_activity`: all, then those not idle, i.e. running a statement or in a transaction; "
                  "the rest are the pools' idle connections) idle and with them asleep; slots: workflows the "
                  "worker holds (DBOS: "
                  "PENDING, counted against their queue's concurrency, so its sleepers' queue has no limit; "
                  "pgqueue: jobs reserved)):", "",
                  "| system | threads idle -> asleep | RSS MiB idle -> asleep | connections idle -> asleep | "
                  "of which busy (not idle) | slots held | load |", "|---|---|---|---|---|---|---|"]
        for system in sizes["systems"]:
            if system in sl:
                s = sl[system]
                i, a = s["idle"], s["asleep"]
                lines.append(f"| {LABELS[system]} | {i['threads']} -> **{a['threads']}** | {i['rss_mib']:.0f} -> "
                             f"{a['rss_mib']:.0f} | {i['connections']} -> {a['connections']} | "
                             f"**{a.get('connections_busy', '-')}** | **{a['slots']}** | {s['load']:.1f} |")
        lines.append("")
    return lines


def _wake_lines(w: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    wk = w.get("wake", {})
    if wk:
        lines += [f"**Wake-up after a durable sleep** ({sizes.get('wakes', '?')} workflows asleep for "
                  f"{sizes.get('wake_seconds', '?')} s, started {sizes.get('wake_gap', '?')} s apart; lateness = "
                  "the start of the step after the sleep - (the start of the step before it + the sleep), ms):", "",
                  "| system | p50 | p99 | max | load |", "|---|---|---|---|---|"]
        for system in sizes["systems"]:
            if system in wk:
                k = wk[system]
                lines.append(f"| {LABELS[system]} | **{k['p50_ms']:.1f}** | **{k['p99_ms']:.1f}** | "
                             f"{k['max_ms']:.1f} | {k['load']:.1f} |")
        lines.append("")
    return lines


def _kill_lines(w: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    kl = w.get("kill", {})
    if kl:
        lines += [f"**SIGKILL mid-run** ({sizes['workflows']:,} workflows, the worker killed once "
                  f"{int(100 * sizes['kill_at'])}% of the effects were written, then started again):", "",
                  "| system | effects at the kill | effect rows after | written twice | every effect once "
                  "| kill -> all finished (s) |", "|---|---|---|---|---|---|"]
        for system in sizes["systems"]:
            if system in kl:
                k = kl[system]
                lines.append(f"| {LABELS[system]} | {k['effects_at_kill']:,} | {k['effects']['rows']:,} | "
                             f"{k['effects']['twice']} | {'yes' if k['exactly_once'] else '**NO**'} | "
                             f"{k.get('seconds_after_kill', float('nan')):.1f} |")
        lines.append("")
    return lines


def update_report(path: Path, lines: list[str]) -> None:
    """Replace (or add, before '## Plots') this section in an existing RESULTS.md, leaving the rest."""
    text = path.read_text() if path.exists() else ""
    block = "\n".join(lines).rstrip() + "\n\n"
    if SECTION in text:
        head, _, rest = text.partition(SECTION)
        tail = rest.split("\n## ", 1)
        text = head + block + ("## " + tail[1] if len(tail) > 1 else "")
    elif "\n## Plots" in text:
        head, _, rest = text.partition("\n## Plots")
        text = head.rstrip() + "\n\n" + block + "## Plots" + rest
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text)


def _plain(value: Any) -> Any:
    if isinstance(value, Series):
        return value.to_data()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


async def _on_own_server(sizes: WorkflowSizes, results: dict[str, Any], key: str) -> None:
    """``run_workflows`` on a PostgreSQL started for it (a temporary data directory, a Unix socket), with
    pg_stat_statements preloaded; the server is destroyed afterwards."""
    import tempfile

    from pgqueue.embedded import EmbeddedPostgres

    folder = Path(tempfile.mkdtemp(prefix="pgq-wfbench-", dir="/tmp"))
    server = EmbeddedPostgres(folder, port=random.randint(20000, 40000),
                              settings={"shared_preload_libraries": "pg_stat_statements", "max_connections": "200"})
    try:
        admin = await asyncio.to_thread(server.start)
        await run_workflows(admin, sizes, results, key)
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            cur = await conn.execute("show server_version")
            row = await cur.fetchone()
            results[key]["server_version"] = str(row[0]) if row else "?"
    finally:
        await asyncio.to_thread(server.destroy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workflows", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin-dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                              "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--workflows", type=int, default=WorkflowSizes.workflows)
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(WorkflowSizes.concurrency))
    parser.add_argument("--runs", type=int, default=WorkflowSizes.runs)
    parser.add_argument("--signals", type=int, default=WorkflowSizes.signals)
    parser.add_argument("--sleepers", type=int, default=WorkflowSizes.sleepers)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--phases", nargs="+", choices=WorkflowSizes.phases, default=list(WorkflowSizes.phases))
    parser.add_argument("--output", type=Path, default=HERE / "results",
                        help="results.json is updated there (its 'workflows' key)")
    parser.add_argument("--report", type=Path, default=HERE / "RESULTS.md",
                        help="the section is replaced (or added) in this file")
    parser.add_argument("--no-write", action="store_true", help="print the figures only")
    parser.add_argument("--statements-server", action="store_true",
                        help="run the throughput phase on a PostgreSQL this harness starts (pgqueue.embedded) with "
                             "pg_stat_statements preloaded, for statements per workflow (kept apart: "
                             "'workflows_statements')")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    log.setLevel(logging.INFO)
    sizes = WorkflowSizes(workflows=args.workflows, concurrency=tuple(args.concurrency), runs=args.runs,
                          signals=args.signals, sleepers=args.sleepers, systems=tuple(args.systems),
                          phases=tuple(args.phases))
    results: dict[str, Any] = {}

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt  # asyncio.run cancels the run: its workers are killed, its databases dropped

    signal.signal(signal.SIGTERM, interrupted)
    key = "workflows_statements" if args.statements_server else "workflows"
    if args.statements_server:
        asyncio.run(_on_own_server(sizes, results, key))
    else:
        asyncio.run(run_workflows(args.admin_dsn, sizes, results, key))
    results[key]["command"] = ("uv run --group bench python -m benchmarks.workflows " + " ".join(
        sys.argv[1:] if argv is None else argv)).strip()
    plain = _plain(results)
    results_file = args.output / "results.json"
    stored = json.loads(results_file.read_text()) if results_file.exists() else {}
    stored[key] = plain[key]
    print("\n".join(report(stored if "workflows" in stored else plain)))
    if not args.no_write:
        args.output.mkdir(parents=True, exist_ok=True)
        results_file.write_text(json.dumps(stored, indent=1, default=str))
        if "workflows" in stored:
            update_report(args.report, report(stored))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
