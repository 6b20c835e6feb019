"""WAL per workflow by record type and relation (issue 27: pgqueue's WAL per workflow at most half of
DBOS Transact's), for the workflow of benchmarks/workflows.py (five steps, each one insert in the
step's own transaction with its checkpoint):

    uv run --group bench python -m benchmarks.workflow_wal                       # pgqueue, 1,000 at c=10
    uv run --group bench python -m benchmarks.workflow_wal --system dbos --workflows 200
    uv run --group bench python -m benchmarks.workflow_wal --checkpoint-at 0.4   # full-page images too

A fresh database with the system installed (as benchmarks.workflows installs it), N workflows
enqueued, then drained by one worker process; for the enqueue and the drain, the database's WAL
(pg_walinspect, as benchmarks.workflows attributes it) per workflow, per resource manager, record
type and relation. Full-page images follow the server's checkpoints, which on a shared server
other sessions cause: ``--checkpoint-at F`` issues a CHECKPOINT once F of the effects are written, so
that the drain pays them at a known point (it flushes the whole server: use it sparingly).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import psycopg

from benchmarks.common import sql
from benchmarks.workflows import STEPS, Process, installed, run_to_end


async def breakdown(admin_dsn: str, system: str, workflows: int, concurrency: int,
                    checkpoint_at: float | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per phase (enqueue, drain), the WAL rows of benchmarks/sql/workflow_wal_breakdown.sql divided by N."""
    async with installed(admin_dsn, system, keep_wal=True) as db:
        if not db.walinspect:
            raise SystemExit("pg_walinspect is not available on this server: no breakdown")
        async with await psycopg.AsyncConnection.connect(db.dsn, autocommit=True) as conn:
            async def position() -> str:
                row = await (await conn.execute("select pg_current_wal_lsn()::text")).fetchone()
                assert row is not None
                return str(row[0])

            start = await position()
            await run_to_end(system, db.dsn, "enqueue", "--workflows", str(workflows))
            middle = await position()
            worker = await Process(system, db.dsn, "drain", "--workflows", str(workflows),
                                   "--concurrency", str(concurrency)).start()
            if checkpoint_at:
                while True:
                    row = await (await conn.execute("select count(*) from bench_effects")).fetchone()
                    if row is not None and row[0] >= checkpoint_at * STEPS * workflows:
                        break
                    await asyncio.sleep(0.05)
                await conn.execute("checkpoint")
            await worker.wait(600 + workflows)
            # pg_walinspect reads up to the flush position: on a server with synchronous_commit = off
            # the drain's last records may not be flushed yet. A transaction with an xid committed with
            # synchronous_commit on flushes everything before its commit record.
            await conn.execute("set synchronous_commit = on")
            await conn.execute("select txid_current()")
            end = await position()
            phases: dict[str, list[dict[str, Any]]] = {}
            for phase, a, b in (("enqueue", start, middle), ("drain", middle, end)):
                cur = await conn.execute(sql("workflow_wal_breakdown"), {"start": a, "end": b})
                phases[phase] = [{"rmgr": r[0], "record": r[1], "relation": r[2], "records": r[3] / workflows,
                                  "bytes": r[4] / workflows, "fpi_bytes": r[5] / workflows}
                                 for r in await cur.fetchall()]
    return phases


def table(phases: dict[str, list[dict[str, Any]]], top: int | None = None) -> list[str]:
    """Markdown: per phase, its totals per workflow and its rows (the largest first)."""
    lines: list[str] = []
    for phase, rows in phases.items():
        total, fpi = sum(r["bytes"] for r in rows), sum(r["fpi_bytes"] for r in rows)
        lines += [f"**{phase}**: {total:,.0f} B per workflow, of which full-page images {fpi:,.0f} B "
                  f"(without them {total - fpi:,.0f} B)", "",
                  "| resource manager | record | relation | records/wf | B/wf | of which FPI |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['rmgr']} | {r['record']} | {r['relation']} | {r['records']:.2f} | {r['bytes']:.1f} | "
                  f"{r['fpi_bytes']:.1f} |" for r in rows[:top]]
        lines.append("")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workflow_wal", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin-dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                              "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--system", choices=("pgqueue", "dbos"), default="pgqueue")
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--checkpoint-at", type=float, default=None,
                        help="issue a CHECKPOINT once this share of the effects is written (0 to 1)")
    parser.add_argument("--top", type=int, default=None, help="rows per phase (default: all)")
    args = parser.parse_args()
    if args.workflows < 1 or args.concurrency < 1 or not (args.checkpoint_at is None or 0 < args.checkpoint_at < 1):
        parser.error("--workflows and --concurrency must be >= 1 and --checkpoint-at between 0 and 1")
    phases = asyncio.run(breakdown(args.admin_dsn, args.system, args.workflows, args.concurrency, args.checkpoint_at))
    print(f"WAL per workflow of {args.system}, {args.workflows} workflows at concurrency {args.concurrency}, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("\n".join(table(phases, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
