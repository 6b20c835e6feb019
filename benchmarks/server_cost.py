"""What a phase costs the PostgreSQL server: CPU of its processes, WAL bytes, full-page images.

``ServerProbe`` brackets a phase (a drain, a bulk enqueue). While it runs, a sampler on the admin
connection (a backend of another database, so not counted) lists every backend of the measured
database and the server's background writer, WAL writer and checkpointer (``pg_stat_activity``)
every ``interval`` seconds, and reads each one's CPU time (utime + stime) from
``/proc/<pid>/stat``; a process's cost is its last reading minus its first (0 for a backend
that started during the phase). A backend that exits between two samples loses at most one
interval of its CPU: the harness's workers keep their connections for the whole phase.

WAL: ``pg_current_wal_lsn()`` before and after (bytes), ``pg_stat_wal`` (PostgreSQL 14+: records,
full-page images), and, where the ``pg_walinspect`` extension is available (PostgreSQL 15+, created
in the measured database, which is dropped afterwards), the bytes of those full-page images
(``pg_get_wal_stats``). The same samples count how often an active backend waited for a lock
(``wait_event_type`` Lock or LWLock): where a curve bends, CPU, WAL or locks say why. WAL and
the background processes are the server's, not the database's:
anything else the server runs at the same time counts too (the report says so).

Needs the server on this host (``/proc``) and a superuser (other users' backends, pg_walinspect).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

import psycopg

from benchmarks.common import sql

BACKGROUND = ("background writer", "walwriter", "checkpointer")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, str] | None:
    """(utime + stime in seconds, start time) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command may contain spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / TICKS, fields[19]


class ServerProbe:
    """Server CPU (per process class), WAL and full-page images over one phase of one database."""

    def __init__(self, admin_dsn: str, dsn: str, interval: float = 0.05) -> None:
        self.admin_dsn = admin_dsn
        self.dsn = dsn
        self.interval = interval
        self.first: dict[tuple[int, str], float] = {}
        self.last: dict[tuple[int, str], float] = {}
        self.kind: dict[tuple[int, str], str] = {}
        self.wal_start: dict[str, Any] = {}
        self.walinspect = False
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._dbname = ""
        self.started = 0.0
        self.elapsed = 0.0
        self.active_samples = 0  # backend samples that were running a statement
        self.lock_samples = 0  # ... of which waiting for a heavyweight lock or an LWLock

    async def __aenter__(self) -> ServerProbe:
        self._conn = await psycopg.AsyncConnection.connect(self.admin_dsn, autocommit=True)
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cur = await conn.execute("select current_database()")
            row = await cur.fetchone()
            assert row is not None
            self._dbname = str(row[0])
            with contextlib.suppress(psycopg.Error):
                await conn.execute("create extension if not exists pg_walinspect")
                self.walinspect = True
        await self._sample(initial=True)
        self.wal_start = await self._wal()
        self.started = time.monotonic()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.started
        self._stop.set()
        if self._task is not None:
            await self._task
        await self._sample(initial=False)
        self.wal_end = await self._wal()
        assert self._conn is not None
        await self._conn.close()

    async def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
            try:
                await self._sample(initial=False)
            except psycopg.Error as exc:  # a sample lost is a sample lost; the phase goes on
                self.error = str(exc)

    async def _sample(self, initial: bool) -> None:
        assert self._conn is not None
        cur = await self._conn.execute(sql("server_processes"), (self._dbname, list(BACKGROUND)))
        for pid, backend_type, state, wait_type in await cur.fetchall():
            if not initial and backend_type not in BACKGROUND and state == "active":
                self.active_samples += 1
                self.lock_samples += wait_type in ("Lock", "LWLock")
            reading = cpu_seconds(int(pid))
            if reading is None:
                continue
            seconds, start = reading
            key = (int(pid), start)
            if key not in self.first:
                # Present at the start: counted from here; started later: all its CPU is the phase's.
                self.first[key] = seconds if initial else 0.0
                self.kind[key] = "background" if backend_type in BACKGROUND else "backends"
            self.last[key] = seconds

    async def _wal(self) -> dict[str, Any]:
        assert self._conn is not None
        try:
            cur = await self._conn.execute(sql("server_wal"))
        except psycopg.errors.UndefinedTable:
            cur = await self._conn.execute(sql("server_wal_lsn"))
        row = await cur.fetchone()
        assert row is not None
        lsn, records, fpi, wal_bytes = row
        return {"lsn": str(lsn), "records": records, "fpi": fpi, "bytes": wal_bytes}

    async def figures(self, jobs: int) -> dict[str, float]:
        """The phase's cost per job (µs of CPU, WAL bytes, full-page images) for ``jobs`` jobs."""
        cpu = {"backends": 0.0, "background": 0.0}
        for key, last in self.last.items():
            cpu[self.kind[key]] += max(0.0, last - self.first[key])
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cur = await conn.execute("select pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::float8",
                                     (self.wal_end["lsn"], self.wal_start["lsn"]))
            row = await cur.fetchone()
            wal_bytes = float(row[0]) if row else float("nan")
            fpi_bytes = float("nan")
            if self.walinspect:
                with contextlib.suppress(psycopg.Error):
                    cur = await conn.execute(sql("server_fpi_bytes"), (self.wal_start["lsn"], self.wal_end["lsn"]))
                    row = await cur.fetchone()
                    fpi_bytes = float(row[0]) if row and row[0] is not None else float("nan")
        per = 1.0 / max(1, jobs)
        fpi = (None if self.wal_end["fpi"] is None or self.wal_start["fpi"] is None
               else float(self.wal_end["fpi"] - self.wal_start["fpi"]))
        return {
            "server_cpu_us_per_job": 1e6 * (cpu["backends"] + cpu["background"]) * per,
            "backend_cpu_us_per_job": 1e6 * cpu["backends"] * per,
            "background_cpu_us_per_job": 1e6 * cpu["background"] * per,
            "server_cpu_busy_pct": 100 * (cpu["backends"] + cpu["background"]) / max(self.elapsed, 1e-9),
            "wal_bytes_per_job": wal_bytes * per,
            "fpi_per_1000_jobs": float("nan") if fpi is None else 1000 * fpi * per,
            "fpi_bytes_per_job": fpi_bytes * per,
            "fpi_share_pct": 100 * fpi_bytes / wal_bytes if wal_bytes > 0 else float("nan"),
            "lock_wait_pct": 100 * self.lock_samples / self.active_samples if self.active_samples else 0.0,
        }
