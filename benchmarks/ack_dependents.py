"""Issue 26 §2: the plain ack's cost with dependencies in the schema.

``pgqueue.ack`` of revision 0009 reads one more column (``has_dependents``) of each row it
deletes and aggregates the ids of those that have dependents; its 0005 body did neither. Both
bodies are installed side by side in a scratch schema of a throwaway database and timed on the
same kind of statement (1,000 reserved jobs without dependents acked at once), interleaved,
their order swapped every round, so the machine's drift hits both alike.

    uv run --frozen python -m benchmarks.ack_dependents [--dsn ADMIN_DSN] [--rounds 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import migrate

ROOT = Path(__file__).resolve().parent.parent
BATCH = 1000


def _body(revision: str, name: str) -> str:
    text = (ROOT / "sql" / "functions" / "ack" / f"{revision}.sql").read_text()
    return text.split("-- The call of revisions before 0005")[0].replace("pgqueue.ack(", f"bench.{name}(")


def _envelope() -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "name": "bench", "args": {}, "connection": "database", "queue": "bench",
            "priority": 0, "tries": 3, "timeout": 30.0, "backoff": {"kind": "fixed", "delays": [0.0]},
            "retry_until": None, "version": 1}


def _one_ack(conn: psycopg.Connection[Any], function: str) -> float:
    conn.execute("select pgqueue.enqueue_many(%s::jsonb)", (json.dumps([_envelope() for _ in range(BATCH)]),))
    rows = conn.execute("select id, token from pgqueue.reserve(array['bench'], %s, 60)", (BATCH,)).fetchall()
    started = time.perf_counter()
    conn.execute(f"select count(*) from bench.{function}(%s::uuid[], %s::bigint[], null, null, false)",
                 ([r[0] for r in rows], [r[1] for r in rows]))
    return time.perf_counter() - started


def run(admin_dsn: str, rounds: int) -> dict[str, float]:
    """Median seconds per 1,000-job ack of each body (the first 4 rounds are warm-up)."""
    name = f"pgqueue_bench_ack_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)
    try:
        migrate.upgrade(dsn)
        times: dict[str, list[float]] = {"0005": [], "0009": []}
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create schema bench")
            conn.execute(_body("0005", "ack_0005").encode())
            conn.execute(_body("0009", "ack_0009").encode())
            for n in range(rounds):
                for revision in ("0005", "0009") if n % 2 else ("0009", "0005"):
                    times[revision].append(_one_ack(conn, f"ack_{revision}"))
        return {revision: statistics.median(ts[4:]) for revision, ts in times.items()}
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'drop database "{name}" with (force)')


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.ack_dependents")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    for revision, seconds in run(args.dsn, args.rounds).items():
        print(f"pgqueue.ack body {revision}: median {seconds * 1000:.2f} ms per {BATCH}-job ack "
              f"({BATCH / seconds:,.0f} jobs/s)")


if __name__ == "__main__":
    main()
