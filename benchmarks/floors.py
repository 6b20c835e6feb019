"""Floors: what the parts of pgqueue's hot paths cost at least on this machine.

    uv run --group bench python -m benchmarks --only floors      # the section of the full run
    uv run python -m benchmarks.floors                            # alone, printed as JSON

The side-by-side sections say how fast pgqueue is; this one says how fast any code on top of the
same table could be, by timing the barest statements each path cannot do without (less than
pgqueue runs: no validation, no queue controls), on a fresh migrated database:

- **commit**: an autocommit ``select txid_current()`` (its commit flushes WAL), warm and after
  ``gap`` seconds idle (cold: what a wake-up meets);
- **notify**: from the return of a committed ``pg_notify`` until a LISTEN connection (blocked in
  a thread of its own) has it; 0 when it arrived first;
- **reserve**, cold (one ready job, ``gap`` idle): ``pgqueue.reserve`` as the worker calls it,
  and the leanest fenced reservation (``sql/floors_reserve_one.sql``: one statement, one priority,
  no controls or tries check). notify + lean reserve is the floor under any wake-up that
  reserves after the notification;
- **single**, one job per transaction, sequentially: a bare INSERT into ``pgqueue.jobs`` with
  its notification (``sql/floors_insert_one.sql``), ``pgqueue.enqueue``, ``client.dispatch``;
- **bulk**, per 1,000 jobs: encoding them (``client.encode_many``), COPY of pre-rendered rows
  into ``pgqueue.jobs`` (``sql/floors_copy_jobs.sql``), ``pgqueue.enqueue_many`` with the text
  encoded beforehand, and ``client.dispatch_many`` end to end;
- **drain CPU**: a drain at concurrency 50 (``benchmarks.worker_drain``) with the machine's busy
  CPU time per job (worker and server together, /proc/stat): not a floor but pgqueue's cost now;
  the number of cores divided by it is the most a drain at that cost can do here.

The report sets them beside the budgets the targets of issue 18 leave (from the same run's peer
figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import psycopg

from benchmarks.common import ROOT, fresh_database, percentile, sql
from benchmarks.systems import pgqueue_job
from pgqueue import Client, migrate
from pgqueue.sql import statement


@dataclass
class FloorSizes:
    """How much each floor measures."""

    samples: int = 300  # warm statements per figure
    cold: int = 100  # cold reservations (and notifications) per figure
    gap: float = 0.05  # idle seconds before a cold one: the wake-up benchmark's mean gap
    single: int = 1000  # sequential one-job transactions per variant
    bulk_calls: int = 30  # calls of bulk_chunk jobs per bulk variant
    bulk_chunk: int = 1000
    drain_jobs: int = 20_000
    drain_concurrency: int = 50
    rounds: int = 3  # the single and bulk variants alternate, round by round

    @classmethod
    def quick(cls) -> FloorSizes:
        """Small sizes: a smoke test of the harness (seconds), not figures to quote."""
        return cls(samples=30, cold=10, single=50, bulk_calls=3, drain_jobs=2000, rounds=1)


def _ms(values: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds of durations in seconds."""
    return {"p50_ms": 1000 * percentile(values, 50), "p99_ms": 1000 * percentile(values, 99)}


async def _timed(action: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await action()
    return time.perf_counter() - started


def _encoded(client: Any, seq: int = 0) -> tuple[uuid.UUID, str]:
    """A fresh no-op job's id and envelope text, as dispatch writes them."""
    envelope = client.envelope(pgqueue_job()(seq=seq))[0]
    return envelope.id, envelope.encode(1 << 20)


async def commit_and_notify(dsn: str, sizes: FloorSizes) -> dict[str, Any]:
    """Durable commit (warm, cold) and NOTIFY delivery from the producer's commit to a listener."""
    figures: dict[str, Any] = {}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for _ in range(20):
            await conn.execute("select txid_current()")
        warm = [await _timed(lambda: conn.execute("select txid_current()")) for _ in range(sizes.samples)]
        cold = []
        for _ in range(sizes.cold):
            await asyncio.sleep(sizes.gap)
            cold.append(await _timed(lambda: conn.execute("select txid_current()")))
        figures["commit_warm"], figures["commit_cold"] = _ms(warm), _ms(cold)

    # The listener blocks in a thread of its own (as a worker's would in its own process), so the
    # producer's event loop never decides when a notification is seen.
    received: dict[str, float] = {}
    arrived = threading.Condition()

    def listen(conn: psycopg.Connection[Any]) -> None:
        for note in conn.notifies():
            with arrived:
                received[note.payload] = time.perf_counter()
                arrived.notify_all()
            if note.payload == "stop":
                return

    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("listen pgqueue_floors")
        thread = threading.Thread(target=listen, args=(listener,), daemon=True)
        thread.start()
        delivery = []
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as producer:
            for n in range(sizes.cold):
                await asyncio.sleep(sizes.gap)
                key = str(n)
                await producer.execute(sql("floors_notify"), (key,))
                committed = time.perf_counter()
                with arrived:
                    if not arrived.wait_for(partial(received.__contains__, key), timeout=10):
                        raise RuntimeError(f"floors: notification {n} did not arrive within 10 s")
                delivery.append(max(0.0, received[key] - committed))
            await producer.execute(sql("floors_notify"), ("stop",))
        thread.join(10)
    figures["notify"] = _ms(delivery)
    return figures


async def reservation(dsn: str, sizes: FloorSizes) -> dict[str, Any]:
    """One ready job, ``gap`` seconds idle, then its reservation: pgqueue.reserve vs the leanest."""
    statements: dict[str, tuple[str | bytes, tuple[Any, ...] | None]] = {
        "reserve": (statement("reserve"), (["default"], 10, 60.0, 10)),
        "reserve_lean": (sql("floors_reserve_one"), None),
    }
    times: dict[str, list[float]] = {name: [] for name in statements}
    async with Client(dsn) as client, await psycopg.AsyncConnection.connect(dsn, autocommit=True) as producer, \
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as worker:
        for i in range(sizes.cold + 5):  # 5 warm-up rounds: the statements get prepared
            for name, (timed, params) in statements.items():
                await producer.execute(statement("enqueue"), (_encoded(client)[1], 0.0))
                await asyncio.sleep(sizes.gap)
                started = time.perf_counter()
                rows = await (await worker.execute(timed, params)).fetchall()
                elapsed = time.perf_counter() - started
                if len(rows) != 1:
                    raise RuntimeError(f"floors: {name} reserved {len(rows)} jobs, expected 1")
                if i >= 5:
                    times[name].append(elapsed)
                await producer.execute(sql("floors_clear"))
    return {name: _ms(values) for name, values in times.items()}


async def enqueue(dsn: str, sizes: FloorSizes) -> dict[str, Any]:
    """Single (per transaction) and bulk (per call of bulk_chunk) enqueue, variants alternating."""
    single: dict[str, list[float]] = {"insert_bare": [], "enqueue_function": [], "dispatch": []}
    bulk: dict[str, list[float]] = {"encode": [], "copy": [], "enqueue_many_function": [], "dispatch_many": []}
    async with Client(dsn) as client, await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for _ in range(sizes.rounds):
            for name, seconds in single.items():
                seconds.append(await _single(name, client, conn, sizes.single))
                await conn.execute(sql("floors_clear"))
            for name, seconds in bulk.items():
                spent = [await _bulk(name, client, conn, sizes.bulk_chunk) for _ in range(sizes.bulk_calls)]
                seconds.append(statistics.fmean(spent) * 1000 / sizes.bulk_chunk)
                await conn.execute(sql("floors_clear"))
    return {"single_us": {name: 1e6 * statistics.median(v) for name, v in single.items()},
            "bulk_ms_per_1000": {name: 1000 * statistics.median(v) for name, v in bulk.items()}}


async def _single(name: str, client: Any, conn: psycopg.AsyncConnection[Any], count: int) -> float:
    """Seconds per job of ``count`` sequential one-job transactions (after 20 that warm up)."""
    noop = pgqueue_job()
    encoded = [_encoded(client, n) for n in range(count + 20)]
    jobs = [noop(seq=n) for n in range(count + 20)]
    started = time.perf_counter()
    for n in range(count + 20):
        if n == 20:  # the first 20 warm the connection and prepare the statement
            started = time.perf_counter()
        job_id, text = encoded[n]
        if name == "insert_bare":
            await conn.execute(sql("floors_insert_one"), (job_id, text))
        elif name == "enqueue_function":
            await conn.execute(statement("enqueue"), (text, 0.0))
        else:
            await client.dispatch(jobs[n])
    return (time.perf_counter() - started) / count


async def _bulk(name: str, client: Any, conn: psycopg.AsyncConnection[Any], chunk: int) -> float:
    """Seconds one bulk call of ``chunk`` fresh jobs takes (only the part ``name`` measures)."""
    noop = pgqueue_job()
    jobs = [noop(seq=n) for n in range(chunk)]
    started = time.perf_counter()
    if name == "dispatch_many":
        await client.dispatch_many(jobs)
        return time.perf_counter() - started
    encoded = client.encode_many(jobs)
    encoding = time.perf_counter() - started
    if name == "encode":
        return encoding
    if name == "enqueue_many_function":
        started = time.perf_counter()
        await conn.execute(statement("enqueue_many"), (encoded.text, None))
        return time.perf_counter() - started
    rows = "".join(f"{job_id}\tdefault\t0\t{_copy_text(envelope)}\t3\n"
                   for job_id, envelope in zip(encoded.ids, json.loads(encoded.text), strict=True))
    started = time.perf_counter()
    async with conn.transaction(), conn.cursor() as cur, cur.copy(sql("floors_copy_jobs")) as copy:
        await copy.write(rows)
    return time.perf_counter() - started


def _copy_text(envelope: Any) -> str:
    """An envelope as a field of COPY's text format."""
    text = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


async def run_floors(admin_dsn: str, sizes: FloorSizes, results: dict[str, Any]) -> None:
    """Measure every floor (each part on a fresh database) into ``results["floors"]``."""
    figures: dict[str, Any] = {"sizes": sizes.__dict__.copy()}
    for part in (commit_and_notify, reservation, enqueue):
        async with fresh_database(admin_dsn, "floors") as dsn:
            await asyncio.to_thread(migrate.upgrade, dsn)
            figures.update(await part(dsn, sizes))
    # In a process of its own: benchmarks.worker_drain registers a no-op job under the name the
    # comparison's (benchmarks.systems) has.
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "benchmarks.worker_drain", "--dsn", admin_dsn, "drain",
                         "--jobs", str(sizes.drain_jobs), "--concurrency", str(sizes.drain_concurrency)],
        cwd=ROOT, capture_output=True, text=True, check=True)
    drained = json.loads(out.stdout.strip().splitlines()[-1])
    figures["drain"] = {key: drained[key] for key in ("concurrency", "jobs", "drain_jobs_per_s", "worker_cpu_s_per_10k",
                                                      "machine_cpu_s_per_10k", "machine_busy_pct")}
    figures["drain"]["nproc"] = os.cpu_count()
    results["floors"] = figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floors", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin-dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                              "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test of the harness")
    args = parser.parse_args(argv)
    sizes = FloorSizes.quick() if args.quick else FloorSizes()
    results: dict[str, Any] = {}
    asyncio.run(run_floors(args.admin_dsn, sizes, results))
    print(json.dumps(results["floors"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
