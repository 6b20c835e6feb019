"""Throughput of pgqueue's bare stored functions, called from Python with no worker around them.

    uv run python -m benchmarks.bare_functions --dsn postgresql://postgres@127.0.0.1:5432/postgres

One psycopg 3 connection (autocommit, prepared statements), a fresh migrated database
per measurement, dropped afterwards:

- enqueue: ``pgqueue.enqueue_many`` of N jobs in chunks (one transaction per chunk);
  the envelopes are serialized before the clock starts, so the figure is the database's.
- reserve + ack: N jobs enqueued, then ``reserve(batch)`` + ``ack(batch)`` (two
  transactions, as a worker does) until the queue is empty, for each batch size.
- ``--explain``: EXPLAIN (ANALYZE, BUFFERS) of the reservation's candidate select
  (sql/queries/explain_reservation.sql) at a 1,000,000-row ready backlog, rolled back.

This is the ceiling the Python worker can approach, not what it achieves.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue import migrate
from pgqueue.sql import statement

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextlib.contextmanager
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """A new migrated database for one measurement; dropped afterwards."""
    name = f"pgqueue_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'create database "{name}"'.encode())
    params = conninfo_to_dict(admin_dsn)
    params["dbname"] = name
    dsn = make_conninfo("", **params)
    try:
        migrate.upgrade(dsn)
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)'.encode())


def envelopes(count: int, queue: str = "default") -> list[dict[str, object]]:
    """Envelopes shaped like the ones dispatch writes."""
    return [
        {"id": str(uuid.uuid4()), "name": "bench:noop", "args": {"n": n}, "connection": "database",
         "queue": queue, "priority": 0, "tries": 3, "timeout": 30.0,
         "backoff": {"kind": "fixed", "delays": [0.0]}, "retry_until": None, "version": 1}
        for n in range(count)
    ]


def chunks_of(items: list[dict[str, object]], size: int) -> list[str]:
    """JSON text of each chunk, serialized here so that json.dumps stays outside the timed part."""
    return [json.dumps(items[i:i + size], separators=(",", ":")) for i in range(0, len(items), size)]


def fill(conn: psycopg.Connection[tuple[object, ...]], chunks: list[str]) -> float:
    """Enqueue every chunk with enqueue_many (one transaction each); the seconds it took."""
    started = time.perf_counter()
    for chunk in chunks:
        conn.execute(b"select pgqueue.enqueue_many(%s::jsonb)", (chunk,))
    return time.perf_counter() - started


def measure_enqueue(admin_dsn: str, jobs: int, chunk: int, rounds: int) -> list[float]:
    """jobs/s of enqueue_many, one figure per round (each round in a fresh database)."""
    figures = []
    for _ in range(rounds):
        payload = chunks_of(envelopes(jobs), chunk)
        with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
            elapsed = fill(conn, payload)
            counted = conn.execute(b"select count(*) from pgqueue.jobs").fetchone()
            assert counted == (jobs,), counted
        figures.append(jobs / elapsed)
    return figures


def commit_latency_ms(admin_dsn: str, commits: int = 100) -> float:
    """Milliseconds per committed one-row write: the floor of every one-job-per-transaction call."""
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(b"create table commit_probe (n integer)")
        started = time.perf_counter()
        for n in range(commits):
            conn.execute(b"insert into commit_probe values (%s)", (n,))
        return (time.perf_counter() - started) / commits * 1000


def measure_reserve_ack(admin_dsn: str, jobs: int, batch: int, lease: float = 60.0) -> float:
    """jobs/s of reserve(batch) + ack(batch) until the queue is empty."""
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        fill(conn, chunks_of(envelopes(jobs), 5000))
        conn.execute(b"vacuum analyze pgqueue.jobs")
        done = 0
        started = time.perf_counter()
        while True:
            granted = conn.execute(b"select id, token from pgqueue.reserve(%s::text[], %s, %s)",
                                   (["default"], batch, lease)).fetchall()
            if not granted:
                break
            acked = conn.execute(b"select count(*) filter (where acked) from pgqueue.ack(%s::uuid[], %s::bigint[])",
                                 ([r[0] for r in granted], [r[1] for r in granted])).fetchone()
            assert acked == (len(granted),), acked
            done += len(granted)
        elapsed = time.perf_counter() - started
        assert done == jobs, (done, jobs)
    return jobs / elapsed


def explain_at_backlog(admin_dsn: str, backlog: int) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the candidate select at a ready backlog, rolled back."""
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn) as conn:
        conn.execute(b"""
            insert into pgqueue.jobs (id, queue, priority, envelope, max_tries, available_at)
            select gen_random_uuid(), 'default', 0, jsonb_build_object('name', 'bench:noop', 'n', g), 3,
                   now() - interval '1 hour' + g * interval '1 microsecond'
            from generate_series(1, %s) g
        """, (backlog,))
        conn.commit()
        conn.autocommit = True
        conn.execute(b"vacuum analyze pgqueue.jobs")
        conn.autocommit = False
        explained = b"explain (analyze, buffers, costs off, timing off) " + statement("explain_reservation")
        now = conn.execute(b"select clock_timestamp()").fetchone()
        assert now is not None
        plan = conn.execute(explained, {"queue": "default", "priority": 0, "now": now[0], "limit": 50}).fetchall()
        conn.rollback()
    return "\n".join(str(row[0]) for row in plan)


def main() -> None:
    """Run the measurements and print jobs/s."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_DSN", DEFAULT_DSN),
                        help="admin DSN; a fresh database is created on that server per measurement")
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs per measurement (default 100,000)")
    parser.add_argument("--jobs-batch-1", type=int, default=20_000,
                        help="jobs for the one-job-per-call measurement (default 20,000)")
    parser.add_argument("--chunk", type=int, default=5_000, help="envelopes per enqueue_many call")
    parser.add_argument("--batches", default="1,50", help="reservation batch sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="enqueue rounds (median reported)")
    parser.add_argument("--explain", action="store_true", help="also print the plan at a 1,000,000-row backlog")
    parser.add_argument("--synchronous-commit", choices=["on", "off"], default=None,
                        help="set synchronous_commit for the benchmark sessions (default: the server's)")
    args = parser.parse_args()
    if args.synchronous_commit:
        # libpq passes this to every session the benchmark opens.
        os.environ["PGOPTIONS"] = f"{os.environ.get('PGOPTIONS', '')} -c synchronous_commit={args.synchronous_commit}"

    with psycopg.connect(args.dsn) as conn:
        print(f"server: {conn.execute(b'select version()').fetchone()}")
        settings = conn.execute(b"select name, setting from pg_settings"
                                b" where name in ('fsync', 'synchronous_commit') order by 1").fetchall()
        print("settings: " + ", ".join(f"{n}={v}" for n, v in settings))
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"commit of a one-row write: {commit_latency_ms(args.dsn):.2f} ms")

    figures = sorted(measure_enqueue(args.dsn, args.jobs, args.chunk, args.rounds))
    print(f"enqueue_many  {args.jobs} jobs in chunks of {args.chunk}: "
          f"median {figures[len(figures) // 2]:,.0f} jobs/s  (rounds: {', '.join(f'{f:,.0f}' for f in figures)})")

    for batch in (int(b) for b in args.batches.split(",")):
        jobs = args.jobs_batch_1 if batch == 1 else args.jobs
        rate = measure_reserve_ack(args.dsn, jobs, batch)
        print(f"reserve+ack   batch {batch:>4}, {jobs} jobs: {rate:,.0f} jobs/s")

    if args.explain:
        print("\nEXPLAIN of sql/queries/explain_reservation.sql at 1,000,000 ready jobs, limit 50:")
        print(explain_at_backlog(args.dsn, 1_000_000))


if __name__ == "__main__":
    main()
