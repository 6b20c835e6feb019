"""Issue 26 (revision 0010): what the GIN index ``dependent_jobs_parents_idx`` (a job's children,
ended or not, for ``pgqueue.job_family``) costs a dispatch with parents.

The same statement, with and without the index, interleaved and their order swapped every round:
one transaction enqueues 1,000 jobs and gives them one parent (``pgqueue.add_dependencies``, the
statement of ``dispatch_many(jobs, after=[parent])``), then rolls back, so the tables stay the
same size. In a throwaway database.

    uv run --frozen python -m benchmarks.dependents_index [--dsn ADMIN_DSN] [--rounds 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

import psycopg

from pgqueue import migrate

BATCH = 1000


def _envelope() -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "name": "bench", "args": {}, "connection": "database", "queue": "bench",
            "priority": 0, "tries": 3, "timeout": 30.0, "backoff": {"kind": "fixed", "delays": [0.0]},
            "retry_until": None, "version": 1}


def _one_dispatch(conn: psycopg.Connection[Any], parent: str) -> float:
    envelopes = [_envelope() for _ in range(BATCH)]
    started = time.perf_counter()
    with conn.transaction(force_rollback=True):
        conn.execute("select pgqueue.enqueue_many(%s::jsonb)", (json.dumps(envelopes),))
        conn.execute("select pgqueue.add_dependencies(%s::uuid[], array[%s]::uuid[], 'cancel')",
                     ([e["id"] for e in envelopes], parent))
    return time.perf_counter() - started


def run(admin_dsn: str, rounds: int) -> dict[str, float]:
    """Median seconds per 1,000-child dispatch with and without the index (4 rounds of warm-up)."""
    name = f"pgqueue_bench_deps_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)
    try:
        migrate.upgrade(dsn)
        times: dict[str, list[float]] = {"with index": [], "without": []}
        with psycopg.connect(dsn, autocommit=True) as conn:
            parent = _envelope()
            conn.execute("select pgqueue.enqueue_many(%s::jsonb)", (json.dumps([parent]),))
            for n in range(rounds):
                for mode in ("with index", "without") if n % 2 else ("without", "with index"):
                    if mode == "without":
                        conn.execute("drop index if exists pgqueue.dependent_jobs_parents_idx")
                    else:
                        conn.execute("create index if not exists dependent_jobs_parents_idx"
                                     " on pgqueue.dependent_jobs using gin (parents)")
                    times[mode].append(_one_dispatch(conn, parent["id"]))
        return {mode: statistics.median(ts[4:]) for mode, ts in times.items()}
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'drop database "{name}" with (force)')


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.dependents_index")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    for mode, seconds in run(args.dsn, args.rounds).items():
        print(f"dispatch of {BATCH} jobs with one parent, {mode}: median {seconds * 1000:.2f} ms")


if __name__ == "__main__":
    main()
