"""What one ``pgqueue.reserve`` costs the server per job, by version of the function (issue 31).

    uv run --frozen python -m benchmarks.reserve_cost --dsn postgresql://postgres@127.0.0.1:5432/postgres

SQL level, no worker, one connection. For each batch size B of ``--batches`` (a worker of
concurrency 50 with prefetch reserves ~400 jobs at a time; 16 and 50 are the small reservations of
a worker that keeps up with its producer), a fresh migrated database holds ``--jobs`` ready no-op
jobs per variant, and every variant's reserve is installed beside the current one under a name of
its own (``pgqueue.reserve_v<NNNN>``, from sql/functions/reserve/<NNNN>.sql; ``current``: this
checkout's newest; a path ending in .sql: a reserve body being tried out). The drain then
*alternates* the variants call by call, each ``reserve_vX(array['default'], B, 60, B)`` followed
by ``ack`` of what it granted in one transaction, so every variant meets the same table (the same
dead rows, the same cache) and the machine's changes of speed, which on a shared machine are larger
than the differences measured, fall on all of them alike. ``--rounds`` repeats it on a fresh
database.

Reported per variant and batch: the function's own time per job (pg_stat_user_functions.self_time,
``track_functions = 'pl'``), milliseconds per call on the client's clock (round trip included), and
the own time's ratio to the first variant's in the same round (the figure to compare).
Revision 0015 replaced 0014's six ``array_position`` searches per granted row (a linear search of
the batch each) by the batch's ordinality joined once, ran the lost attempts' insert only when
there are some, and the argument checks' queries only when their arguments are given. Variant 0007
is the reserve of issue 31's base revision (db1473d). Prints the figures (``--json``: writes them
too); RESULTS.md is not rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.bare_functions import envelopes, fresh_database

SQL = Path(__file__).resolve().parent.parent / "sql" / "functions"
CREATE = "create or replace function pgqueue.reserve("


def body_of(variant: str) -> str:
    """The main ``pgqueue.reserve`` definition of a variant's file, renamed ``pgqueue.reserve_v<label>``."""
    path = Path(variant) if variant.endswith(".sql") else SQL / "reserve" / f"{variant}.sql"
    if variant == "current":
        path = max((SQL / "reserve").glob("[0-9][0-9][0-9][0-9].sql"))
    if not path.exists():
        raise SystemExit(f"benchmarks.reserve_cost: no {path}")
    text = path.read_text()
    start = text.index(CREATE)
    end = text.index("\n$$;", start) + len("\n$$;")
    return text[start:end].replace(CREATE, f"create function pgqueue.reserve_v{label(variant)}(", 1)


def label(variant: str) -> str:
    return re.sub(r"\W", "_", Path(variant).stem)


def drain(admin_dsn: str, variants: list[str], jobs: int, batch: int) -> dict[str, dict[str, float]]:
    with fresh_database(admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        for variant in variants:
            conn.execute(body_of(variant).encode())
        total = jobs * len(variants)
        for start in range(0, total, 10_000):
            chunk = envelopes(min(10_000, total - start))
            conn.execute(b"select pgqueue.enqueue_many(%s::jsonb)", (json.dumps(chunk),))
        conn.execute(b"analyze pgqueue.jobs")
        conn.execute(b"set track_functions = 'pl'")
        conn.execute(b"select pg_stat_reset()")
        seconds = dict.fromkeys(variants, 0.0)
        granted = dict.fromkeys(variants, 0)
        calls = dict.fromkeys(variants, 0)
        turn = 0
        while True:
            variant = variants[turn % len(variants)]
            turn += 1
            with conn.transaction():
                t0 = time.perf_counter()
                rows = conn.execute(f"select id, token from pgqueue.reserve_v{label(variant)}"
                                    "(array['default'], %s, 60, %s)".encode(), (batch, batch)).fetchall()
                seconds[variant] += time.perf_counter() - t0
                if rows:
                    conn.execute(b"select pgqueue.ack(%s::uuid[], %s::bigint[])",
                                 ([r[0] for r in rows], [r[1] for r in rows]))
            if not rows:
                break
            calls[variant] += 1
            granted[variant] += len(rows)
        conn.execute(b"select pg_stat_force_next_flush()")
        self_ms: dict[str, float] = {
            str(name): float(str(ms)) for name, ms in conn.execute(
                b"select funcname, self_time from pg_stat_user_functions where schemaname = 'pgqueue'").fetchall()}
        [[left]] = conn.execute(b"select count(*) from pgqueue.jobs").fetchall()
    if sum(granted.values()) != total or left != 0:
        raise SystemExit(f"benchmarks.reserve_cost: B={batch} drained {sum(granted.values())} of {total}, {left} left")
    return {v: {"reserve_self_us_per_job": 1000 * self_ms[f"reserve_v{label(v)}"] / granted[v],
                "ms_per_call": 1000 * seconds[v] / calls[v]} for v in variants}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reserve_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--variants", default="0007,0014,current",
                        help="reserve versions (sql/functions/reserve/<NNNN>.sql), current, or paths of .sql files")
    parser.add_argument("--batches", default="16,50,400")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs drained per variant, batch and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    batches = [int(b) for b in args.batches.split(",")]
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        for batch in batches:
            order = variants if round_ % 2 == 0 else variants[::-1]
            for variant, figures in drain(args.dsn, order, args.jobs, batch).items():
                runs.setdefault((batch, variant), []).append(figures)
    report: list[dict[str, Any]] = []
    print(f"{args.jobs} jobs per variant, {args.rounds} rounds, variants alternating call by call; "
          "medians (min-max)")
    base = variants[0]
    print(f"{'B':>4} {'variant':>10} {'reserve self us/job':>24} {'ms per call':>20} {f'self / {label(base)}':>22}")
    for (batch, variant), measured in sorted(runs.items(), key=lambda kv: (kv[0][0], variants.index(kv[0][1]))):
        row: dict[str, Any] = {"variant": variant, "batch": batch}
        cells = []
        for key, digits in (("reserve_self_us_per_job", 1), ("ms_per_call", 2)):
            values = [m[key] for m in measured]
            row[key] = values
            cells.append(f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})")
        # The same round's figures side by side: the ratio to the first variant, round by round.
        ratios = [m["reserve_self_us_per_job"] / b["reserve_self_us_per_job"]
                  for m, b in zip(measured, runs[(batch, base)], strict=True)]
        row["self_ratio_to_first"] = ratios
        cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        report.append(row)
        print(f"{batch:>4} {label(variant):>10} {cells[0]:>24} {cells[1]:>20} {cells[2]:>22}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
