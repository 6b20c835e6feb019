"""pgqueue partitions (issue 28): what serving a queue by partition costs, and what it buys.

    uv run --frozen python -m benchmarks.partitions --dsn postgresql://postgres@127.0.0.1:5432/postgres

SQL level, no worker: each reservation is one ``pgqueue.reserve(queue, 50, 60, 50)`` and one
``pgqueue.ack`` of what it granted, in one transaction, on a fresh migrated database per case.

- **Scale of keys** (interleaved rounds): drain 20,000 ready jobs of a queue without partition
  settings (plain), of a fair queue with 1 partition, and of a fair queue with 10,000 partitions
  (2 jobs each); jobs per second and milliseconds per reservation; each case with the partition
  functions of revision 0009 (reinstalled over the current ones) and with the current ones.
- **The plain path, before and after** (interleaved rounds, one database): ``enqueue_many`` of
  revision 0008 and ``reserve`` of 0009, installed beside the current ones under other names, against
  the current ones, on jobs without a partition in a queue without partition settings.
- **Isolation**: a fair queue with one partition of ``--heavy`` ready jobs, then 200 partitions of
  10 jobs dispatched after it; how many jobs are reserved before the last light job is (FIFO
  would reserve every heavy job first).

With a worker process (``--workers``: the benchmarks' worker runner, ``benchmarks/worker_drain.py``,
one process of ``--concurrency`` 50, prefetch as default), each case on a fresh database, the
cases of a scenario interleaved and their order swapped every round, and each case run once with
the partition functions of revision 0009 (reinstalled over the current ones) and once with the
current ones (0016, or any other name; variant 0015, 0014, 0011 or 0010: that revision's versions
of the functions changed since):

    uv run --frozen python -m benchmarks.partitions --dsn ... --workers [--rounds 2] [--heavy 100000]

- **isolation**: ``--heavy`` ready jobs in one partition, the worker started, and 1 s later 200
  partitions x 10 jobs dispatched in one transaction; total throughput (all jobs / drain time) of
  the fair queue against the same drain of a queue without partition settings (jobs without a
  partition), and the light jobs' start wait (handler start - dispatch commit), p50 / p99 / max.
- **no collapse**: a queue concurrency limit of 40 against no limit (both with a worker of
  concurrency 40: the limit takes no parallelism away, only what enforcing it costs, prefetch
  included); and 1,000 partitions with a per-partition concurrency of 2 against the same jobs in a
  queue without partition settings (worker concurrency 50). Each with jobs that await 100 ms
  (4,000 jobs), 10 ms (20,000) and none (20,000): the shorter the job, the more a reservation's
  round trip, which a limit keeps the worker from doing ahead (prefetch), weighs.
- **plain path**: 50,000 jobs without a partition in a queue without settings (the variants side
  by side: the unpartitioned path before and after).
- **scale of keys**: 20,000 jobs in 10,000 partitions against 1 partition (both fair):
  throughput, and machine CPU seconds per 10,000 jobs (worker + server: the reservation's cost).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.bare_functions import fresh_database
from benchmarks.worker_drain import finish, machine_busy_seconds, percentile


def _envelopes(count: int, queue: str, partition_of: list[str | None], name: str | None = None) -> str:
    """``name`` None: SQL-level jobs (args {"n": n}); else jobs a benchmark worker runs (no args)."""
    items = []
    for n in range(count):
        envelope: dict[str, object] = {
            "id": str(uuid.uuid4()), "name": name or "bench:noop", "args": {} if name else {"n": n},
            "connection": "database", "queue": queue,
            "priority": 0, "tries": 3, "timeout": 30.0, "backoff": {"kind": "fixed", "delays": [0.0]},
            "retry_until": None, "version": 1}
        partition = partition_of[n % len(partition_of)]
        if partition is not None:
            envelope["partition"] = partition
        items.append(envelope)
    return json.dumps(items)


def _fill(conn: psycopg.Connection[tuple[object, ...]], count: int, queue: str,
          partition_of: list[str | None], name: str | None = None) -> None:
    for start in range(0, count, 10_000):
        size = min(10_000, count - start)
        conn.execute(b"select pgqueue.enqueue_many(%s::jsonb)", (_envelopes(size, queue, partition_of, name),))


def _reserve_and_ack(conn: psycopg.Connection[tuple[object, ...]], queue: str) -> list[uuid.UUID]:
    with conn.transaction():
        rows = conn.execute(b"select id, token from pgqueue.reserve(array[%s], 50, 60, 50)", (queue,)).fetchall()
        if rows:
            conn.execute(b"select pgqueue.ack(%s::uuid[], %s::bigint[])",
                         ([r[0] for r in rows], [r[1] for r in rows]))
    return [r[0] for r in rows]  # type: ignore[misc]


def scale_case(admin_dsn: str, partitions: int, functions: str = "0016") -> tuple[float, float]:
    """Jobs/s and ms per reservation draining 20,000 jobs in ``partitions`` partitions (0: plain queue),
    with the partition functions of revision ``functions`` (see :data:`PREVIOUS`)."""
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        _install(conn, functions)
        names: list[str | None] = [f"tenant:{p}" for p in range(partitions)] or [None]
        _fill(conn, 20_000, "q", names)
        if partitions:
            conn.execute(b"select pgqueue.set_partition_limits('q', null, null, null, null, true)")
        conn.execute(b"analyze pgqueue.jobs")
        started, calls, done = time.perf_counter(), 0, 0
        while granted := _reserve_and_ack(conn, "q"):
            calls, done = calls + 1, done + len(granted)
        elapsed = time.perf_counter() - started
    return done / elapsed, 1000 * elapsed / max(calls, 1)


def isolation_case(admin_dsn: str, heavy: int) -> tuple[int, int]:
    """Jobs reserved before the last of 2,000 light jobs dispatched after ``heavy`` jobs of one partition,
    and the jobs FIFO would have reserved first."""
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        _fill(conn, heavy, "q", ["heavy"])
        _fill(conn, 2_000, "q", [f"light:{p}" for p in range(200)])
        conn.execute(b"select pgqueue.set_partition_limits('q', null, null, null, null, true)")
        light = {r[0] for r in conn.execute(b"select id from pgqueue.jobs where partition like 'light:%'").fetchall()}
        reserved = 0
        while light:
            granted = _reserve_and_ack(conn, "q")
            assert granted, "the queue ran dry before every light job was reserved"
            reserved += len(granted)
            light.difference_update(granted)
    return reserved, heavy + 2_000


SQL = Path(__file__).resolve().parent.parent / "sql" / "functions"


def _install_previous(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """enqueue_many 0008 as pgqueue.enqueue_many_before, reserve 0009 as pgqueue.reserve_before."""
    for name, version in (("enqueue_many", "0008"), ("reserve", "0009")):
        text = (SQL / name / f"{version}.sql").read_text()
        conn.execute(text.replace(f"pgqueue.{name}(", f"pgqueue.{name}_before(").encode())


def plain_path(admin_dsn: str, rounds: int) -> dict[str, list[float]]:
    """Microseconds per job of enqueue_many and of reserve + ack, before (0008/0009) and now, interleaved."""
    timings: dict[str, list[float]] = {}
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        _install_previous(conn)
        for n in range(rounds * 2):
            for suffix in (("_before", "") if n % 2 == 0 else ("", "_before")):
                batches = [_envelopes(1_000, "plain", [None]) for _ in range(10)]
                started = time.perf_counter()
                for batch in batches:
                    conn.execute(f"select pgqueue.enqueue_many{suffix}(%s::jsonb)".encode(), (batch,))
                timings.setdefault(f"enqueue_many{suffix}", []).append((time.perf_counter() - started) * 100)
                started, done = time.perf_counter(), 0
                while done < 10_000:
                    with conn.transaction():
                        rows = conn.execute(f"select id, token from pgqueue.reserve{suffix}(array['plain'], 50, 60, 50)"
                                            .encode()).fetchall()
                        conn.execute(b"select pgqueue.ack(%s::uuid[], %s::bigint[])",
                                     ([r[0] for r in rows], [r[1] for r in rows]))
                    done += len(rows)
                timings.setdefault(f"reserve{suffix} + ack", []).append((time.perf_counter() - started) * 100)
    return timings


# ---------------------------------------------------------------- with a worker process

#: The partition functions a case runs with: revision 0009's files reinstalled over the current
#: ones, revision 0010's (CHANGED_IN_0011), revision 0011's (CHANGED_IN_0013), revision 0014's reserve,
#: revision 0015's reserve_partitions, or the current ones (0016).
PREVIOUS = (("partition_allowance", "0009"), ("reserve_partitions", "0009"), ("reserve", "0009"))
#: Variant "0010": these functions as revision 0010 shipped them (issue 28's changes in 0011).
CHANGED_IN_0011 = ("reserve_partitions", "reserve")
#: Variant "0011": these functions as revision 0011 shipped them (issue 28's changes in 0013);
#: variant "0014": reserve as revision 0014 shipped it (issue 31 changed it in 0015);
#: variant "0015": reserve_partitions as revision 0015 shipped it (0013's; issue 28 changed it in 0016:
#: limits without fair shares in due order); variant "0016" (or any other name): the current functions.
CHANGED_IN_0013 = ("reserve_partitions",)

#: benchmarks/worker_drain.py's jobs: none, a 10 ms await, a 100 ms await.
NOOP, PAUSE, LONG = "bench:noop", "bench:pause", "bench:pause100"

Setup = Callable[[psycopg.Connection[tuple[object, ...]]], None]


def _install(conn: psycopg.Connection[tuple[object, ...]], functions: str) -> None:
    functions = functions.split("+", maxsplit=1)[0]  # "<functions>+main": with the worker of --before-worker
    if functions in ("0009", "0010", "main"):
        # reserve 0013 and 0014 have more (defaulted) parameters: an older reserve beside it would make
        # every call of the older signature ambiguous.
        conn.execute(b"drop function pgqueue.reserve(text[], integer, double precision, integer, integer[], uuid[], "
                     b"bigint[])")
    if functions == "0009":
        for name, version in PREVIOUS:
            conn.execute((SQL / name / f"{version}.sql").read_text().encode())
    elif functions == "0010":
        # Revision 0010's versions of the functions revision 0011 changed, over the current ones
        # (reserve_partitions 0011 has one more out parameter: dropped first).
        conn.execute(b"drop function pgqueue.reserve_partitions(pgqueue.queues, smallint, integer, timestamptz, "
                     b"timestamptz)")
        for name in CHANGED_IN_0011:
            conn.execute((SQL / name / "0010.sql").read_text().encode())
    elif functions == "0011":
        for name in CHANGED_IN_0013:
            conn.execute((SQL / name / "0011.sql").read_text().encode())
    elif functions == "0014":
        conn.execute((SQL / "reserve" / "0014.sql").read_text().encode())
    elif functions == "0015":
        conn.execute((SQL / "reserve_partitions" / "0013.sql").read_text().encode())
    elif functions == "main":
        # The current revision's functions as another checkout has them (--before-worker), over ours.
        theirs = Path(BEFORE_WORKER[0]) / "sql" / "functions"
        for name, _ in PREVIOUS:
            conn.execute((theirs / name / "0010.sql").read_text().encode())


#: Variant "0009+main": revision 0009's functions and the worker of another checkout (--before-worker:
#: a directory holding the pgqueue, benchmarks and sql of the main branch, before this change);
#: variant "main": that checkout's functions of the current revision and its worker.
BEFORE_WORKER: list[str] = []


def spawn_worker(dsn: str, concurrency: int, max_jobs: int, cwd: str | None) -> subprocess.Popen[str]:
    """benchmarks.worker_drain's worker process, run from ``cwd`` (None: this checkout): it imports
    the pgqueue package found there."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.worker_drain", "--worker", dsn, str(concurrency),
                             str(max_jobs), "0", "", "0"], stdout=subprocess.PIPE, text=True, cwd=cwd)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert json.loads(line)["ready"], line
    return proc


def worker_case(admin_dsn: str, functions: str, total: int, setup: Setup, concurrency: int,
                later: Setup | None = None) -> dict[str, Any]:
    """Drain ``total`` jobs (filled by ``setup``; ``later`` dispatches more 1 s after the worker started)
    with one worker process; throughput, machine CPU per 10,000 jobs, and the start waits of
    the ``bench:stamp`` jobs ``later`` dispatched (seconds from their commit)."""
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        _install(conn, functions)
        setup(conn)
        # Count the worker's pgqueue.reserve calls: jobs per reservation.
        conn.execute(f"alter database {conn.info.dbname} set track_functions = 'pl'".encode())
        conn.execute(b"analyze pgqueue.jobs")
        busy = machine_busy_seconds()
        proc = spawn_worker(dsn, concurrency, total, BEFORE_WORKER[0] if functions.endswith("main") else None)
        committed = 0.0
        if later is not None:
            time.sleep(1.0)
            later(conn)
            committed = time.time()
        result = finish(proc)
        busy = machine_busy_seconds() - busy
        waits = [started - committed for _, started in result["results"]]
        time.sleep(0.6)  # the worker's backend reports its function counts when it ends, within 0.5 s
        calls = conn.execute(b"select sum(calls) from pg_stat_user_functions "
                             b"where schemaname = 'pgqueue' and funcname = 'reserve'").fetchone()
        reserves = int(calls[0]) if calls and calls[0] else 0
        # The server's time in reserve and ack (with what they call) per job, from the same counts.
        spent: dict[str, float] = dict(conn.execute(
            b"select funcname, sum(total_time) from pg_stat_user_functions "
            b"where schemaname = 'pgqueue' and funcname in ('reserve', 'ack') group by funcname").fetchall())
        processed = max(result["processed"], 1)
        figures: dict[str, Any] = {"jobs_per_s": result["jobs_per_s"], "processed": result["processed"],
                                   "machine_cpu_s_per_10k": 10_000 * busy / processed,
                                   "jobs_per_reserve": result["processed"] / reserves if reserves else None,
                                   "reserve_us_per_job": 1_000 * float(spent.get("reserve") or 0) / processed,
                                   "ack_us_per_job": 1_000 * float(spent.get("ack") or 0) / processed}
        if waits:
            figures.update({"wait_p50_s": statistics.median(waits), "wait_p99_s": percentile(waits, 0.99),
                            "wait_max_s": max(waits), "light_jobs": len(waits)})
        return figures


def _plain(count: int, job: str = "bench:noop") -> Setup:
    return lambda conn: _fill(conn, count, "default", [None], job)


def _fair(count: int, partitions: int) -> Setup:
    def setup(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        _fill(conn, count, "default", [f"tenant:{p}" for p in range(partitions)], "bench:noop")
        conn.execute(b"select pgqueue.set_partition_limits('default', null, null, null, null, true)")
    return setup


def _queue_limit(count: int, limit: int, job: str) -> Setup:
    def setup(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        _fill(conn, count, "default", [None], job)
        conn.execute(b"select pgqueue.set_limits('default', %s, null, null)", (limit,))
    return setup


def _keyed(count: int, partitions: int, job: str) -> Setup:
    """Jobs in ``partitions`` partitions of a queue without partition settings (not served by partition)."""
    return lambda conn: _fill(conn, count, "default", [f"tenant:{p}" for p in range(partitions)], job)


def _capped(count: int, partitions: int, cap: int, job: str) -> Setup:
    def setup(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        _fill(conn, count, "default", [f"tenant:{p}" for p in range(partitions)], job)
        conn.execute(b"select pgqueue.set_partition_limits('default', %s, null, null, null, false)", (cap,))
    return setup


def _light(partitioned: bool) -> Setup:
    names: list[str | None] = [f"light:{p}" for p in range(200)] if partitioned else [None]
    return lambda conn: _fill(conn, 2_000, "default", names, "bench:stamp")


def worker_scenarios(heavy: int) -> dict[str, dict[str, tuple[int, Setup, Setup | None]]]:
    """Per scenario, its cases: (jobs in all, setup, later)."""
    return {
        "isolation": {
            "plain queue": (heavy + 2_000, _plain(heavy), _light(False)),
            "fair, 1 heavy + 200 light partitions": (heavy + 2_000, _fair(heavy, 1), _light(True)),
        },
        "no collapse: queue limit, 100 ms jobs (worker concurrency 40)": {
            "no limit": (4_000, _plain(4_000, LONG), None),
            "queue concurrency 40": (4_000, _queue_limit(4_000, 40, LONG), None),
        },
        "no collapse: per-partition limits, 100 ms jobs": {
            "no limit, no partitions": (4_000, _plain(4_000, LONG), None),
            "1,000 partitions, 2 each at most": (4_000, _capped(4_000, 1_000, 2, LONG), None),
        },
        "no collapse: queue limit, 10 ms jobs (worker concurrency 40)": {
            "no limit": (20_000, _plain(20_000, PAUSE), None),
            "queue concurrency 40": (20_000, _queue_limit(20_000, 40, PAUSE), None),
        },
        "no collapse: queue limit, no-op jobs (worker concurrency 40)": {
            "no limit": (20_000, _plain(20_000), None),
            "queue concurrency 40": (20_000, _queue_limit(20_000, 40, NOOP), None),
        },
        "no collapse: per-partition limits, 10 ms jobs": {
            "no limit, no partitions": (20_000, _plain(20_000, PAUSE), None),
            "1,000 partitions, 2 each at most": (20_000, _capped(20_000, 1_000, 2, PAUSE), None),
        },
        "no collapse: per-partition limits, no-op jobs": {
            "no limit, no partitions": (20_000, _plain(20_000), None),
            # the same jobs as the capped case, without limits: what the partition keys cost alone
            "1,000 partitions, no limit": (20_000, _keyed(20_000, 1_000, NOOP), None),
            "1,000 partitions, 2 each at most": (20_000, _capped(20_000, 1_000, 2, NOOP), None),
        },
        "plain path": {  # the unpartitioned path, before (0009+main) and after
            "plain queue, 50,000 jobs": (50_000, _plain(50_000), None),
        },
        "scale of keys": {
            "fair, 1 partition": (20_000, _fair(20_000, 1), None),
            "fair, 10,000 partitions": (20_000, _fair(20_000, 10_000), None),
        },
    }


def run_workers(admin_dsn: str, rounds: int, heavy: int, concurrency: int, only: list[str],
                functions: list[str]) -> None:
    """Each scenario's cases x functions, interleaved, ``rounds`` times; prints a table per scenario."""
    load = os.getloadavg()
    for scenario, cases in worker_scenarios(heavy).items():
        if only and not any(o in scenario for o in only):
            continue
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        order = [(case, version) for case in cases for version in functions]
        for n in range(rounds):
            for case, version in (order if n % 2 == 0 else order[::-1]):
                total, setup, later = cases[case]
                figures = worker_case(admin_dsn, version, total, setup,
                                      40 if "worker concurrency 40" in scenario else concurrency, later)
                figures["load"] = os.getloadavg()[0]
                print(json.dumps({"scenario": scenario, "case": case, "functions": version, **figures}), flush=True)
                runs.setdefault((case, version), []).append(figures)
        print(f"\n{scenario} (one worker, {rounds} rounds, load average at start "
              f"{load[0]:.2f}):\n")
        print("| case | functions | jobs/s (median, range) | machine CPU s / 10k jobs | jobs / reserve "
              "| light start wait p50 / p99 / max s |")
        print("|---|---|---|---|---|---|")
        for (case, version), found in runs.items():
            rates = [f["jobs_per_s"] for f in found]
            cpu = statistics.median(f["machine_cpu_s_per_10k"] for f in found)
            waits = "-"
            if "wait_p99_s" in found[0]:
                waits = " / ".join(f"{statistics.median(f[k] for f in found):.2f}"
                                   for k in ("wait_p50_s", "wait_p99_s", "wait_max_s"))
            per_call = statistics.median(f["jobs_per_reserve"] or 0 for f in found)
            print(f"| {case} | {version} | **{statistics.median(rates):,.0f}** ({min(rates):,.0f}-{max(rates):,.0f}) "
                  f"| {cpu:.2f} | {per_call:.0f} | {waits} |", flush=True)
        print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="an admin DSN (databases are created and dropped)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heavy", type=int, default=100_000)
    parser.add_argument("--workers", action="store_true", help="the scenarios with a worker process")
    parser.add_argument("--concurrency", type=int, default=50, help="--workers: the worker's concurrency")
    parser.add_argument("--only", action="append", default=[], help="--workers: scenarios whose name contains this")
    parser.add_argument("--functions", default="0015,0016",
                        help="the variants compared: 0009, 0010, 0011, 0014, 0015, 0016 (the current functions), "
                             "main (with --before-worker: its functions); "
                             "--workers: 0009+main too (0009's functions, the worker of --before-worker)")
    parser.add_argument("--before-worker", metavar="DIR",
                        help="--workers: a checkout of main (git archive main pgqueue benchmarks | tar -x -C DIR) "
                             "whose worker runs the 0009+main variant")
    args = parser.parse_args()
    if args.before_worker:
        BEFORE_WORKER.append(args.before_worker)
    if args.workers:
        run_workers(args.dsn, args.rounds, args.heavy, args.concurrency, args.only, args.functions.split(","))
        return
    cases = {"plain queue": 0, "fair, 1 partition": 1, "fair, 10,000 partitions": 10_000}
    results: dict[str, list[tuple[float, float]]] = {}
    versions = [v for v in args.functions.split(",") if not v.endswith("+main")]
    for n in range(args.rounds):
        for name, partitions in cases.items():
            for version in versions if n % 2 == 0 else versions[::-1]:
                results.setdefault(f"{name}, functions {version}", []).append(
                    scale_case(args.dsn, partitions, version))
    print("| 20,000 ready jobs | drain jobs/s (median, range) | ms per reserve(50) + ack |")
    print("|---|---|---|")
    for name, runs in results.items():
        rates, costs = [r[0] for r in runs], [r[1] for r in runs]
        print(f"| {name} | **{statistics.median(rates):,.0f}** ({min(rates):,.0f}-{max(rates):,.0f}) "
              f"| **{statistics.median(costs):.2f}** ({min(costs):.2f}-{max(costs):.2f}) |")
    print("\n| plain jobs, plain queue | us per job (median, range) |")
    print("|---|---|")
    for name, micros in sorted(plain_path(args.dsn, args.rounds).items()):
        label = name.replace("_before", " (before: enqueue_many 0008, reserve 0009)")
        print(f"| {label} | **{statistics.median(micros):.1f}** ({min(micros):.1f}-{max(micros):.1f}) |")
    reserved, fifo = isolation_case(args.dsn, args.heavy)
    print(f"\nisolation: {args.heavy:,} heavy jobs, then 200 partitions x 10: the last light job was reserved "
          f"after {reserved:,} reservations of jobs (FIFO: {fifo:,})")


if __name__ == "__main__":
    main()
