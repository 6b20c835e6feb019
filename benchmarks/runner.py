"""The command line: ``python -m benchmarks [--quick] [--only ...] [--sustained-minutes M]``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import peers
from benchmarks.common import Series, environment
from benchmarks.compare import (
    Case,
    Sizes,
    alternate,
    bulk_enqueue,
    delayed_lateness,
    drain,
    single_enqueue,
    wakeup_latency,
)
from benchmarks.floors import FloorSizes, run_floors
from benchmarks.report import write_report
from benchmarks.result_wakeup import ResultSizes, run_result_wakeup
from benchmarks.scaling import ScalingSizes, run_scaling
from benchmarks.scenarios import (
    ScenarioSizes,
    held_cases,
    held_depth,
    pinned_xmin,
    processes_cases,
    processes_drain,
)
from benchmarks.sustained import SustainedSizes, run_sustained
from benchmarks.systems import SYSTEMS
from benchmarks.workflows import WorkflowSizes, run_workflows

HERE = Path(__file__).resolve().parent
SECTIONS = ("single", "bulk", "drain", "latency", "delayed", "processes", "held", "xmin", "scaling", "sustained",
            "floors", "results", "workflows")
log = logging.getLogger("benchmarks")


def _plain(value: Any) -> Any:
    if isinstance(value, Series):
        return value.to_data()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f}, {five:.1f}, {fifteen:.1f}"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = Sizes(runs=args.runs)
    scaling = ScalingSizes(runs=args.runs)
    sustained = SustainedSizes(minutes=args.sustained_minutes)
    floors = FloorSizes()
    scenarios = ScenarioSizes(xmin_runs=args.xmin_runs)
    result_sizes = ResultSizes(runs=args.runs)
    if args.quick:
        result_sizes = ResultSizes.quick()
        scenarios = ScenarioSizes.quick()
        sizes = Sizes(single=300, bulk=5000, drain=2000, latency=40, delayed=40, delayed_span=4.0, runs=args.runs)
        scaling = ScalingSizes(ready=(1_000, 10_000, 100_000), delayed=100_000, delayed_ready=5_000,
                               drain_jobs=10_000, runs=args.runs)
        floors = FloorSizes.quick()
    if args.drain_jobs:
        sizes.drain = args.drain_jobs
    results_file = args.output / "results.json"
    results: dict[str, Any] = {}
    if args.only and results_file.exists():
        results = json.loads(results_file.read_text())  # keep the sections not rerun
    results["environment"] = await environment(args.admin_dsn)
    results["command"] = "python -m benchmarks " + " ".join(sys.argv[1:])
    results["sizes"] = dataclasses.asdict(sizes)
    results["load_start"] = _load()
    results.setdefault("notes", [])
    only = set(args.only or SECTIONS)
    # Failures of the sections rerun now are theirs to report again; the others' are kept.
    results["failures"] = [f for f in results.get("failures", []) if f.split()[0] not in only]
    # The peers' venvs and the base revision's worktree (made once, kept in --peers-dir).
    chosen = [s for s in SYSTEMS if s in (args.systems or SYSTEMS)]
    prepared = peers.Peers(args.peers_dir, base_rev=args.base_rev, oban_python=args.oban_python)
    prepared.prepare(chosen)
    peers.PEERS = prepared
    chosen = [s for s in chosen if prepared.available(s)]
    results["environment"]["systems"] = chosen
    results["environment"]["left_out"] = prepared.problems
    results["environment"]["base_rev"] = args.base_rev
    results["environment"]["base_commit"] = prepared.base_commit
    results["environment"]["versions"]["oban"] = peers.OBAN_VERSION if "oban" in chosen else "not measured"
    results["scenario_sizes"] = dataclasses.asdict(scenarios)
    systems = [Case(s) for s in chosen]
    # The original trio (and pgqueue@rev) also at concurrency 1; the new peers from 10 up, as issue 31 ran them.
    drains = [Case(c.system, concurrency=n) for n in (1, 10, 50) for c in systems
              if n > 1 or c.system in ("pgqueue", "pgqueue_base", "procrastinate", "pgqueuer")]
    extra = [c for c in (Case("pgqueue", "push"), Case("pgqueuer", "psycopg")) if c.system in chosen]

    plan = [
        ("single", [*systems, *extra], single_enqueue(sizes)),
        ("bulk", [*systems, *[c for c in extra if c.system == "pgqueuer"]], bulk_enqueue(sizes)),
        ("drain", drains + ([Case("pgqueuer", "unlimited")] if "pgqueuer" in chosen else []), drain(sizes)),
        # PgQueuer on PsycopgDriver (what this harness used before) shows the driver's ~80 ms wake-up.
        ("latency", [*systems, *[c for c in extra if c.system == "pgqueuer"]], wakeup_latency(sizes)),
        ("delayed", [*systems, *([Case("procrastinate", "poll0.5")] if "procrastinate" in chosen else [])],
         delayed_lateness(sizes)),
        ("processes", processes_cases(chosen, scenarios), processes_drain(scenarios)),
        ("held", held_cases(chosen), held_depth(scenarios)),
        ("xmin", systems, pinned_xmin(scenarios)),
    ]
    if "floors" in only:
        # First: the enqueue sections the floors are set beside run next, minutes apart.
        results.pop("floors", None)
        await run_floors(args.admin_dsn, floors, results)
    for name, cases, measure in plan:
        if name in only:
            results.pop(name, None)
            runs = scenarios.xmin_runs if name == "xmin" else sizes.runs
            await alternate(args.admin_dsn, name, cases, runs, measure, results)
            results[name] = _plain(results[name])
            write_report(_plain(results), args.output, args.report)
    if "results" in only:
        # issue 26 §3: handle.result() wake-up beside the worker's (pgqueue alone, in this process).
        results.pop("results", None)
        await run_result_wakeup(args.admin_dsn, result_sizes, results)
        write_report(_plain(results), args.output, args.report)
    if "workflows" in only:
        # issue 27: durable workflows beside DBOS Transact (pgqueue and dbos, whatever --systems says).
        results.pop("workflows", None)
        workflow_sizes = WorkflowSizes.quick() if args.quick else WorkflowSizes(runs=args.runs)
        await run_workflows(args.admin_dsn, workflow_sizes, results)
        results["workflows"]["command"] = results["command"]
        write_report(_plain(results), args.output, args.report)
    if "scaling" in only:
        await run_scaling(args.admin_dsn, scaling, results)
        write_report(_plain(results), args.output, args.report)
    if "sustained" in only:
        await run_sustained(args.admin_dsn, sustained, results)
    results["load_end"] = _load()
    plain: dict[str, Any] = _plain(results)
    return plain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="pgqueue vs procrastinate, PgQueuer, awa, chancy, oban and its own base revision on one "
                    "PostgreSQL; writes RESULTS.md and plots.")
    parser.add_argument("--admin-dsn", default=os.environ.get("PGQUEUE_BENCH_DSN",
                                                              "postgresql://postgres@127.0.0.1:5432/postgres"),
                        help="a superuser DSN; each measurement creates and drops its own database "
                             "(env PGQUEUE_BENCH_DSN)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median, min, max); default 3")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (minutes, not an hour); combine with --runs 1 and "
                             "--sustained-minutes 1 for a smoke test")
    parser.add_argument("--only", nargs="+", choices=SECTIONS,
                        help="run only these sections (the others are kept from results/results.json)")
    parser.add_argument("--sustained-minutes", type=float, default=10.0,
                        help="duration of the sustained-load run; default 10")
    parser.add_argument("--drain-jobs", type=int, default=None,
                        help="jobs per drain run (every concurrency); default 20000")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS,
                        help="measure only these systems (default: all; pgqueue_base is pgqueue@--base-rev)")
    parser.add_argument("--base-rev", default=peers.DEFAULT_BASE_REV,
                        help=f"the revision measured as pgqueue@REV, from a worktree with its own venv "
                             f"(default {peers.DEFAULT_BASE_REV}, this wave's base)")
    parser.add_argument("--peers-dir", type=Path, default=peers.default_directory(),
                        help="where oban's venv and the base revision's worktree and venv are made and kept "
                             "(outside the checkout: its link to benchmarks/ would loop linters; default "
                             "$XDG_CACHE_HOME/pgqueue-bench or ~/.cache/pgqueue-bench)")
    parser.add_argument("--oban-python", default=None,
                        help="a Python >= 3.12 for oban's venv (default: the first found on PATH or in ~/.pyenv)")
    parser.add_argument("--xmin-runs", type=int, default=1,
                        help="rounds of the pinned-xmin scenario (3 minutes per system each); default 1")
    parser.add_argument("--output", type=Path, default=HERE / "results", help="plots and results.json")
    parser.add_argument("--report", type=Path, default=HERE / "RESULTS.md", help="the Markdown report")
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing; rewrite the report and plots from results/results.json")
    args = parser.parse_args(argv)
    if args.report_only:
        write_report(json.loads((args.output / "results.json").read_text()), args.output, args.report)
        return 0
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    if args.sustained_minutes <= 0:
        parser.error("--sustained-minutes must be > 0")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    log.setLevel(logging.INFO)
    started = time.monotonic()
    results = asyncio.run(run(args))
    write_report(results, args.output, args.report)
    log.info("done in %.0f s: %s", time.monotonic() - started, args.report)
    return 0
