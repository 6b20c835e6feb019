"""What one ``pgqueue.reserve`` costs the server per job, by version of the function (issue 31).

    uv run --frozen python -m benchmarks.reserve_cost --dsn postgresql://postgres@127.0.0.1:5432/postgres

SQL level, no worker, one connection: drain ``--jobs`` ready no-op jobs by ``reserve(array['default'],
B, 60, B)`` then ``ack`` of what it granted, one transaction per batch, for each batch size B of
``--batches`` (the worker's reservations are ~400 jobs at concurrency 50 with prefetch). Each
variant runs on a fresh migrated database with the reserve function of that revision installed
over the current one (``current``: this checkout's newest), the variants interleaved and their
order swapped every round. Reported per variant and batch: milliseconds per reserve call (client
clock, round trip included), server CPU per job of the backend (user + system, from
/proc/<pid>/stat: the server must run on this machine) and the time pg_stat_user_functions gives
``pgqueue.reserve`` (self time, per job).

Revision 0015 replaced the six ``array_position`` searches per granted row of 0014 (a linear search
of the batch each) by the batch's ordinality joined once: at B = 400 that search was most of the
reservation's cost, at B = 50 it is noise. Variant 0007 is the base revision of issue 31 (db1473d).
Prints the figures (and writes them as JSON with ``--json``); RESULTS.md is not rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.bare_functions import envelopes, fresh_database

SQL = Path(__file__).resolve().parent.parent / "sql" / "functions"
CURRENT_SIGNATURE = b"pgqueue.reserve(text[], integer, double precision, integer, integer[], uuid[], bigint[])"


def install(conn: psycopg.Connection[tuple[object, ...]], variant: str) -> None:
    """Reserve as revision ``variant`` shipped it, over the current one ("current": leave it; a path
    ending in .sql: that file, a reserve of the current signature being tried out)."""
    if variant == "current":
        return
    if variant.endswith(".sql"):
        conn.execute(Path(variant).read_text().encode())
        return
    if not (SQL / "reserve" / f"{variant}.sql").exists():
        raise SystemExit(f"benchmarks.reserve_cost: no sql/functions/reserve/{variant}.sql")
    if int(variant) < 13:
        # Before 0013 reserve had fewer (defaulted) parameters: beside the current one every call
        # of the older signature would be ambiguous; and the three-argument one returned less.
        conn.execute(b"drop function " + CURRENT_SIGNATURE)
        conn.execute(b"drop function pgqueue.reserve(text[], integer, double precision)")
    conn.execute((SQL / "reserve" / f"{variant}.sql").read_text().encode())


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a local process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drain(admin_dsn: str, variant: str, jobs: int, batch: int) -> dict[str, float]:
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        install(conn, variant)
        for start in range(0, jobs, 10_000):
            chunk = envelopes(min(10_000, jobs - start))
            conn.execute(b"select pgqueue.enqueue_many(%s::jsonb)", (json.dumps(chunk),))
        conn.execute(b"analyze pgqueue.jobs")
        conn.execute(b"set track_functions = 'pl'")
        conn.execute(b"select pg_stat_reset()")
        [[pid]] = conn.execute(b"select pg_backend_pid()").fetchall()
        cpu_before, reserve_seconds, calls, done = cpu_seconds(int(str(pid))), 0.0, 0, 0
        started = time.perf_counter()
        while True:
            with conn.transaction():
                t0 = time.perf_counter()
                rows = conn.execute(b"select id, token from pgqueue.reserve(array['default'], %s, 60, %s)",
                                    (batch, batch)).fetchall()
                reserve_seconds += time.perf_counter() - t0
                if not rows:
                    break
                conn.execute(b"select pgqueue.ack(%s::uuid[], %s::bigint[])",
                             ([r[0] for r in rows], [r[1] for r in rows]))
            calls, done = calls + 1, done + len(rows)
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(int(str(pid))) - cpu_before
        conn.execute(b"select pg_stat_force_next_flush()")
        [[self_ms]] = conn.execute(b"select coalesce(sum(self_time), 0) from pg_stat_user_functions "
                                   b"where schemaname = 'pgqueue' and funcname = 'reserve'").fetchall()
        with conn.transaction():  # nothing left behind
            [[left]] = conn.execute(b"select count(*) from pgqueue.jobs").fetchall()
    if done != jobs or left != 0:
        raise SystemExit(f"benchmarks.reserve_cost: {variant} B={batch} drained {done} of {jobs}, {left} left")
    return {"ms_per_reserve": 1000 * reserve_seconds / calls, "server_cpu_us_per_job": 1e6 * cpu / done,
            "reserve_self_us_per_job": 1000 * float(str(self_ms)) / done, "jobs_per_s": done / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reserve_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--variants", default="0007,0014,current",
                        help="reserve versions (sql/functions/reserve/<NNNN>.sql), current, or paths of .sql files")
    parser.add_argument("--batches", default="50,400")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    batches = [int(b) for b in args.batches.split(",")]
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        for batch in batches:
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                runs.setdefault((variant, batch), []).append(drain(args.dsn, variant, args.jobs, batch))
    report: list[dict[str, Any]] = []
    print(f"{args.jobs} jobs, {args.rounds} rounds; medians (min-max)")
    print(f"{'variant':>8} {'B':>4} {'ms/reserve':>22} {'server CPU us/job':>22} {'reserve self us/job':>22} "
          f"{'jobs/s':>18}")
    for (variant, batch), figures in runs.items():
        row: dict[str, Any] = {"variant": variant, "batch": batch}
        cells = []
        for key in ("ms_per_reserve", "server_cpu_us_per_job", "reserve_self_us_per_job", "jobs_per_s"):
            values = [f[key] for f in figures]
            row[key] = values
            cells.append(f"{statistics.median(values):8.1f} ({min(values):.1f}-{max(values):.1f})")
        report.append(row)
        print(f"{variant:>8} {batch:>4} " + " ".join(f"{c:>22}" for c in cells))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
