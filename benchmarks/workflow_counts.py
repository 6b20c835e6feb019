"""Issue 27 (revision 0010): what the overview's workflow counts (``sql/queries/workflow_counts.sql``:
the live workflows by state, at most 10,001 read) cost at scale, with and without the partial index
``jobs_workflows_idx``.

A throwaway database holds ``--sleepers`` workflows parked in ``context.sleep`` (dispatched, reserved
and parked by ``pgqueue.workflow_wait``, the worker's own statement) beside ``--plain`` plain jobs;
``EXPLAIN (ANALYZE)`` of the statement, with and without the index, interleaved, its order swapped
every round; the median execution time each (the first 2 rounds are warm-up), and the plan's scan.

    uv run --frozen python -m benchmarks.workflow_counts [--dsn ADMIN_DSN] [--sleepers 10000]
        [--plain 1000000] [--rounds 12]
"""

from __future__ import annotations

import argparse
import json
import statistics
import uuid
from typing import Any

import psycopg

from pgqueue import migrate
from pgqueue.sql import statement

CAP = 10_000
INDEX = "create index if not exists jobs_workflows_idx on pgqueue.jobs (id) where envelope ? 'workflow'"
ENVELOPE = ("jsonb_build_object('id', gen_random_uuid(), 'name', %s::text, 'args', '{}'::jsonb, "
            "'connection', 'database', 'queue', %s::text, 'priority', 0, 'tries', 3, 'timeout', 30.0, "
            "'backoff', jsonb_build_object('kind', 'fixed', 'delays', jsonb_build_array(0.0)), "
            "'retry_until', null, 'version', 1)")


def _seed(conn: psycopg.Connection[Any], sleepers: int, plain: int) -> None:
    conn.execute(f"select count(pgqueue.enqueue({ENVELOPE} || '{{\"workflow\": 1}}'::jsonb, 0)) "
                 "from generate_series(1, %s)", ("bench:sleeper", "wf", sleepers))
    while True:  # each sleeper's first attempt, as a worker runs it: reserved, then parked in its sleep
        row = conn.execute("select count(*) from pgqueue.reserve(array['wf'], 1000, 600) r, lateral "
                           "pgqueue.workflow_wait(r.id, r.token, 1, 'sleep#1', 'sleep', null, 86400) w").fetchone()
        if not row or not row[0]:
            break
    for start in range(0, plain, 100_000):
        conn.execute(f"select count(pgqueue.enqueue({ENVELOPE}, 0)) from generate_series(1, %s)",
                     ("bench:plain", "other", min(100_000, plain - start)))
    conn.execute("vacuum analyze pgqueue.jobs")
    conn.execute("vacuum analyze pgqueue.workflow_steps")


def _explain(conn: psycopg.Connection[Any]) -> tuple[float, str]:
    """The statement's execution time (ms) and the scan of pgqueue.jobs its plan chose."""
    query = statement("workflow_counts").decode()
    row = conn.execute(f"explain (analyze, format json) {query}", {"cap": CAP}).fetchone()
    assert row is not None
    plan = row[0][0]
    scans = [node["Node Type"] + (f" on {node['Index Name']}" if "Index Name" in node else "")
             for node in _nodes(plan["Plan"]) if node.get("Relation Name") == "jobs"
             or "jobs_workflows_idx" in node.get("Index Name", "")]
    return float(plan["Execution Time"]), ", ".join(scans)


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *[n for child in node.get("Plans", []) for n in _nodes(child)]]


def run(admin_dsn: str, sleepers: int, plain: int, rounds: int) -> dict[str, Any]:
    """Median milliseconds with and without the index, and each one's scan of the jobs."""
    name = f"pgqueue_bench_wfcounts_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)
    try:
        migrate.upgrade(dsn)
        times: dict[str, list[float]] = {"with index": [], "without": []}
        scans: dict[str, str] = {}
        with psycopg.connect(dsn, autocommit=True) as conn:
            _seed(conn, sleepers, plain)
            counted = conn.execute(statement("workflow_counts"), {"cap": CAP}).fetchall()
            for n in range(rounds):
                for mode in ("with index", "without") if n % 2 else ("without", "with index"):
                    conn.execute(INDEX if mode == "with index" else "drop index if exists pgqueue.jobs_workflows_idx")
                    conn.execute("analyze pgqueue.jobs")
                    elapsed, scans[mode] = _explain(conn)
                    times[mode].append(elapsed)
        return {"sleepers": sleepers, "plain": plain, "counted": dict(counted),
                **{f"{mode} ms": round(statistics.median(ts[2:]), 1) for mode, ts in times.items()},
                **{f"{mode} scan": scan for mode, scan in scans.items()}}
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'drop database "{name}" with (force)')


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.workflow_counts")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--sleepers", type=int, default=10_000)
    parser.add_argument("--plain", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    print(json.dumps(run(args.dsn, args.sleepers, args.plain, args.rounds), indent=2))


if __name__ == "__main__":
    main()
