"""What the adaptive-limit check costs the plain ack (issue 28): ``pgqueue.ack`` of revision 0005
against revision 0009's (which probes ``queues_adaptive_idx`` for adaptive queues) and 0010's (the
same probe, its index also holding queues with adaptive partitions, and the partition of each acked
job collected), on a queue without adaptive bounds, interleaved in one database.

    uv run python -m benchmarks.adaptive_ack --rounds 16

Each round installs one version of ``pgqueue.ack`` (they alternate: every other round in reverse order), dispatches
2,000 jobs and times 20 ``pgqueue.ack`` statements of 100 reserved jobs each (the statement only:
the reservation is not timed). Printed: the median and the fastest round's mean per statement.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks.common import fresh_database
from benchmarks.systems import install

SQL = Path(__file__).resolve().parents[1] / "sql"
VERSIONS = {"0005": "functions/ack/0005.sql", "0009": "functions/ack/0009.sql", "0010": "functions/ack/0010.sql"}


def _envelope() -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "name": "bench:ack", "args": {}, "connection": "database",
            "queue": "default", "priority": 0, "tries": 3, "timeout": 30.0,
            "backoff": {"kind": "fixed", "delays": [0.0]}, "retry_until": None, "version": 1}


def one_round(conn: psycopg.Connection[Any], text: str) -> float:
    """Install ``text`` (a version of pgqueue.ack), then the mean ms of 20 acks of 100 jobs."""
    conn.execute(text.encode())
    conn.execute(b"select pgqueue.enqueue_many(%s, null)", (Jsonb([_envelope() for _ in range(2000)]),))
    total = 0.0
    for _ in range(20):
        grants = conn.execute(b"select id, token from pgqueue.reserve(array['default'], 100, 60)").fetchall()
        started = time.perf_counter()
        conn.execute(b"select count(*) from pgqueue.ack(%s::uuid[], %s::bigint[], null, null, false)",
                     ([g[0] for g in grants], [g[1] for g in grants])).fetchall()
        total += time.perf_counter() - started
    return total / 20 * 1000


async def run(admin_dsn: str, rounds: int) -> dict[str, dict[str, float]]:
    """``rounds`` rounds of each version on one fresh database."""
    figures: dict[str, list[float]] = {version: [] for version in VERSIONS}
    async with fresh_database(admin_dsn, "adaptive_ack") as dsn:
        await install("pgqueue", dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(b"select pgqueue.set_limits('other', 5, null, null)")  # a controlled queue, not adaptive
            for round_no in range(rounds):
                order = list(VERSIONS) if round_no % 2 == 0 else list(reversed(VERSIONS))
                for version in order:
                    figures[version].append(one_round(conn, (SQL / VERSIONS[version]).read_text(encoding="utf-8")))
    return {version: {"median_ms": round(statistics.median(values), 3), "fastest_ms": round(min(values), 3)}
            for version, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"),
                        help="admin DSN of the server to benchmark on (the run creates and drops a database)")
    parser.add_argument("--rounds", type=int, default=16)
    args = parser.parse_args()
    print(json.dumps({"bench": "adaptive_ack", "per_ack_of_100_jobs": asyncio.run(run(args.dsn, args.rounds))}))


if __name__ == "__main__":
    main()
