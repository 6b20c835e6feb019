"""pgqueue partitions (issue 28): what serving a queue by partition costs, and what it buys.

    uv run --frozen python -m benchmarks.partitions --dsn postgresql://postgres@127.0.0.1:5432/postgres

SQL level, no worker: each reservation is one ``pgqueue.reserve(queue, 50, 60, 50)`` and one
``pgqueue.ack`` of what it granted, in one transaction, on a fresh migrated database per case.

- **Scale of keys** (interleaved rounds): drain 20,000 ready jobs of a queue without partition
  settings (plain), of a fair queue with 1 partition, and of a fair queue with 10,000 partitions
  (2 jobs each); jobs per second and milliseconds per reservation.
- **The plain path, before and after** (interleaved rounds, one database): ``enqueue_many`` of
  revision 0008 and ``reserve`` of 0007, installed beside the current ones under other names, against
  the current ones, on jobs without a partition in a queue without partition settings.
- **Isolation**: a fair queue with one partition of ``--heavy`` ready jobs, then 200 partitions of
  10 jobs dispatched after it; how many jobs are reserved before the last light job is (FIFO
  would reserve every heavy job first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path

import psycopg

from benchmarks.bare_functions import fresh_database


def _envelopes(count: int, queue: str, partition_of: list[str | None]) -> str:
    items = []
    for n in range(count):
        envelope: dict[str, object] = {
            "id": str(uuid.uuid4()), "name": "bench:noop", "args": {"n": n}, "connection": "database", "queue": queue,
            "priority": 0, "tries": 3, "timeout": 30.0, "backoff": {"kind": "fixed", "delays": [0.0]},
            "retry_until": None, "version": 1}
        partition = partition_of[n % len(partition_of)]
        if partition is not None:
            envelope["partition"] = partition
        items.append(envelope)
    return json.dumps(items)


def _fill(conn: psycopg.Connection[tuple[object, ...]], count: int, queue: str,
          partition_of: list[str | None]) -> None:
    for start in range(0, count, 10_000):
        size = min(10_000, count - start)
        conn.execute(b"select pgqueue.enqueue_many(%s::jsonb)", (_envelopes(size, queue, partition_of),))


def _reserve_and_ack(conn: psycopg.Connection[tuple[object, ...]], queue: str) -> list[uuid.UUID]:
    with conn.transaction():
        rows = conn.execute(b"select id, token from pgqueue.reserve(array[%s], 50, 60, 50)", (queue,)).fetchall()
        if rows:
            conn.execute(b"select pgqueue.ack(%s::uuid[], %s::bigint[])",
                         ([r[0] for r in rows], [r[1] for r in rows]))
    return [r[0] for r in rows]  # type: ignore[misc]


def scale_case(admin_dsn: str, partitions: int) -> tuple[float, float]:
    """Jobs/s and ms per reservation draining 20,000 jobs in ``partitions`` partitions (0: plain queue)."""
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
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
    """enqueue_many 0008 as pgqueue.enqueue_many_before, reserve 0007 as pgqueue.reserve_before."""
    for name, version in (("enqueue_many", "0008"), ("reserve", "0007")):
        text = (SQL / name / f"{version}.sql").read_text()
        conn.execute(text.replace(f"pgqueue.{name}(", f"pgqueue.{name}_before(").encode())


def plain_path(admin_dsn: str, rounds: int) -> dict[str, list[float]]:
    """Microseconds per job of enqueue_many and of reserve + ack, before (0008/0007) and now, interleaved."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="an admin DSN (databases are created and dropped)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heavy", type=int, default=100_000)
    args = parser.parse_args()
    cases = {"plain queue": 0, "fair, 1 partition": 1, "fair, 10,000 partitions": 10_000}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, partitions in cases.items():
            results[name].append(scale_case(args.dsn, partitions))
    print("| 20,000 ready jobs | drain jobs/s (median, range) | ms per reserve(50) + ack |")
    print("|---|---|---|")
    for name, runs in results.items():
        rates, costs = [r[0] for r in runs], [r[1] for r in runs]
        print(f"| {name} | **{statistics.median(rates):,.0f}** ({min(rates):,.0f}-{max(rates):,.0f}) "
              f"| **{statistics.median(costs):.2f}** ({min(costs):.2f}-{max(costs):.2f}) |")
    print("\n| plain jobs, plain queue | us per job (median, range) |")
    print("|---|---|")
    for name, micros in sorted(plain_path(args.dsn, args.rounds).items()):
        print(f"| {name.replace('_before', ' (before: 0008/0007)')} | **{statistics.median(micros):.1f}** "
              f"({min(micros):.1f}-{max(micros):.1f}) |")
    reserved, fifo = isolation_case(args.dsn, args.heavy)
    print(f"\nisolation: {args.heavy:,} heavy jobs, then 200 partitions x 10: the last light job was reserved "
          f"after {reserved:,} reservations of jobs (FIFO: {fifo:,})")


if __name__ == "__main__":
    main()
