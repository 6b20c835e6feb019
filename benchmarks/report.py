"""RESULTS.md and the PNG plots, from the results dictionary (also saved as results/results.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks import report_peers, result_wakeup, workflows
from benchmarks.systems import SYSTEMS

COLORS = {"pgqueue": "#1f77b4", "pgqueue_base": "#aec7e8", "procrastinate": "#ff7f0e", "pgqueuer": "#2ca02c",
          "awa": "#d62728", "chancy": "#9467bd", "oban": "#8c564b"}


def fmt(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def cell(series: dict[str, Any] | None, digits: int = 0) -> str:
    """``median (min-max)`` of a series."""
    if not series:
        return "-"
    return f"**{fmt(series['median'], digits)}** ({fmt(series['min'], digits)}-{fmt(series['max'], digits)})"


_RESULTS: dict[str, Any] = {}  # the results being reported, for the base revision's name in labels


def _label(key: str) -> str:
    return report_peers.label(key, _RESULTS)


def _median(results: dict[str, Any], section: str, key: str, figure: str) -> float:
    try:
        return float(results[section][key][figure]["median"])
    except KeyError:
        return float("nan")


def _best(results: dict[str, Any], section: str, system: str, figure: str, lowest: bool = False) -> tuple[float, str]:
    found = [(float(v[figure]["median"]), k) for k, v in results.get(section, {}).items()
             if k.split("/")[0] == system and figure in v]
    if not found:
        return float("nan"), "-"
    return (min(found) if lowest else max(found))


# -------------------------------------------------------------------- plots
def _bars(ax: Any, results: dict[str, Any], section: str, keys: list[str], figure: str, title: str,
          log: bool = False) -> None:
    present = [k for k in keys if k in results.get(section, {})]
    medians = [results[section][k][figure]["median"] for k in present]
    lows = [m - results[section][k][figure]["min"] for m, k in zip(medians, present, strict=True)]
    highs = [results[section][k][figure]["max"] - m for m, k in zip(medians, present, strict=True)]
    colors = [COLORS.get(k.split("/")[0], "grey") for k in present]
    ax.bar(range(len(present)), medians, yerr=[lows, highs], color=colors, capsize=4)
    ax.set_xticks(range(len(present)), [_label(k) for k in present], rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)


def plot_throughput(results: dict[str, Any], out: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    single = list(results.get("single", {}))
    bulk = list(results.get("bulk", {}))
    _bars(axes[0], results, "single", single, "jobs_per_s", "single enqueue, 1 transaction/job (jobs/s)")
    _bars(axes[1], results, "bulk", bulk, "jobs_per_s", "bulk enqueue (jobs/s)")
    drain = results.get("drain", {})
    concurrencies = sorted({int(k.rsplit("/c", 1)[1]) for k in drain if "/c" in k})
    present = [s for s in SYSTEMS if any(k.split("/")[0] == s for k in drain)]
    width = 0.8 / max(1, len(present))
    for i, system in enumerate(present):
        keys = [f"{system}/c{c}" for c in concurrencies]
        med = [drain.get(k, {}).get("jobs_per_s", {}).get("median", float("nan")) for k in keys]
        lo = [m - drain.get(k, {}).get("jobs_per_s", {}).get("min", m) for m, k in zip(med, keys, strict=True)]
        hi = [drain.get(k, {}).get("jobs_per_s", {}).get("max", m) - m for m, k in zip(med, keys, strict=True)]
        axes[2].bar([x + i * width for x in range(len(concurrencies))], med, width, yerr=[lo, hi],
                    label=_label(system), color=COLORS[system], capsize=3)
    axes[2].set_xticks([x + width for x in range(len(concurrencies))], [f"concurrency {c}" for c in concurrencies])
    axes[2].set_yscale("log")
    axes[2].set_title("drain, one worker process (jobs/s, log scale)", fontsize=10)
    axes[2].legend(fontsize=8)
    axes[2].grid(axis="y", alpha=0.3)
    fig.suptitle("Throughput: median of runs, bars show min-max")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_latency(results: dict[str, Any], out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, section, figures, title in (
            (axes[0], "latency", ("p50_ms", "p95_ms", "p99_ms"), "wake-up latency, commit -> handler start (ms)"),
            (axes[1], "delayed", ("p50_ms", "p99_ms"), "delayed-job lateness, due -> handler start (ms)")):
        keys = list(results.get(section, {}))
        width = 0.8 / max(1, len(figures))
        for i, figure in enumerate(figures):
            med = [results[section][k][figure]["median"] for k in keys]
            ax.bar([x + i * width for x in range(len(keys))], [max(m, 0.01) for m in med], width, label=figure)
        ax.set_xticks([x + width for x in range(len(keys))], [_label(k) for k in keys], rotation=20, fontsize=8)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_sustained(results: dict[str, Any], out: Path) -> None:
    samples = results["sustained"]["samples"]
    t = [s["t"] / 60 for s in samples]
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    axes[0].plot(t, [s["jobs_per_s"] for s in samples], color=COLORS["pgqueue"])
    axes[0].set_ylabel("completed jobs/s")
    axes[0].set_ylim(bottom=0)
    axes[1].plot(t, [s["table_bytes"] / 2**20 for s in samples], color="purple")
    axes[1].set_ylabel("pgqueue.jobs total size (MiB)")
    axes[1].set_ylim(bottom=0)
    axes[2].plot(t, [s["dead_tuples"] for s in samples], color="red", label="dead tuples")
    axes[2].plot(t, [s["rows"] for s in samples], color="grey", label="rows (backlog + reserved)")
    axes[2].set_ylabel("tuples")
    axes[2].set_xlabel("minutes")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("pgqueue sustained load: enqueue and drain concurrently")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_scaling(results: dict[str, Any], out: Path) -> None:
    scaling = results["scaling"]
    labels = list(scaling)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, figure, title in ((axes[0], "jobs_per_s", "drain throughput (jobs/s)"),
                              (axes[1], "reserve_ms", "one reserve(50) call (ms)")):
        med = [scaling[k][figure]["median"] for k in labels]
        lo = [m - scaling[k][figure]["min"] for m, k in zip(med, labels, strict=True)]
        hi = [scaling[k][figure]["max"] - m for m, k in zip(med, labels, strict=True)]
        ax.bar(range(len(labels)), med, yerr=[lo, hi], color=COLORS["pgqueue"], capsize=4)
        ax.set_xticks(range(len(labels)), labels, rotation=15, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("pgqueue backlog scaling")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------- report
def _targets(results: dict[str, Any]) -> list[str]:
    """Issue 18's targets, each from this run's medians (peers at the same concurrency where one is set)."""
    lines = ["| target | pgqueue | procrastinate | PgQueuer | ratio | met |", "|---|---|---|---|---|---|"]
    nan = float("nan")

    def ratio(ours: float, peer: float) -> float:
        return ours / peer if peer and not math.isnan(peer) else nan

    def verdict(*met: bool) -> str:
        return "yes" if all(met) else "NO"

    if "drain" in results:
        def drain(key: str) -> float:
            return _median(results, "drain", key, "jobs_per_s")

        ours, pr, pq = drain("pgqueue/c1"), drain("procrastinate/c1"), drain("pgqueuer/c1")
        lines.append(f"| drain at concurrency 1, jobs/s (need 3x PgQueuer) | {fmt(ours)} | {fmt(pr)} | {fmt(pq)} | "
                     f"{fmt(ratio(ours, pq), 1)}x PgQueuer | {verdict(ratio(ours, pq) >= 3)} |")
        ours, pr, pq = drain("pgqueue/c10"), drain("procrastinate/c10"), drain("pgqueuer/c10")
        lines.append(f"| drain at concurrency 10, jobs/s (need 5x PgQueuer, 15x procrastinate) | {fmt(ours)} | "
                     f"{fmt(pr)} | {fmt(pq)} | {fmt(ratio(ours, pq), 1)}x PgQueuer, {fmt(ratio(ours, pr), 1)}x "
                     f"procrastinate | {verdict(ratio(ours, pq) >= 5, ratio(ours, pr) >= 15)} |")
        ours, ok = _best(results, "drain", "pgqueue", "jobs_per_s")
        pq = drain("pgqueuer/unlimited")
        pr, pk = _best(results, "drain", "procrastinate", "jobs_per_s")
        lines.append(f"| drain, pgqueue's best ({ok}) vs PgQueuer's uncapped default, jobs/s (need 5x) | "
                     f"{fmt(ours)} | {fmt(pr)} ({pk}) | {fmt(pq)} | {fmt(ratio(ours, pq), 1)}x PgQueuer | "
                     f"{verdict(ratio(ours, pq) >= 5)} |")
    for section, need in (("single", 1.5), ("bulk", 2.0)):
        if section in results:
            # Best variant of every system (each peer on its best driver), so no peer is held back.
            ours, _ = _best(results, section, "pgqueue", "jobs_per_s")
            default_ours = _median(results, section, "pgqueue", "jobs_per_s")
            pr, pq = (_best(results, section, s, "jobs_per_s")[0] for s in ("procrastinate", "pgqueuer"))
            r = ratio(ours, max(pr, pq))
            lines.append(f"| {section} enqueue, jobs/s (need {need}x the better peer; best variant of each, pgqueue "
                         f"default {fmt(default_ours)}) | {fmt(ours)} | {fmt(pr)} | {fmt(pq)} | {fmt(r, 2)}x | "
                         f"{verdict(r >= need)} |")
    if "latency" in results:
        ours = _median(results, "latency", "pgqueue", "p99_ms")
        pr, pq = (_best(results, "latency", s, "p99_ms", lowest=True)[0] for s in ("procrastinate", "pgqueuer"))
        better = min(pr, pq)
        lines.append(f"| wake-up p99, ms (need at most half the better peer's; best variant of each) | "
                     f"{fmt(ours, 1)} | {fmt(pr, 1)} | {fmt(pq, 1)} | {fmt(ratio(ours, better), 2)}x | "
                     f"{verdict(ours <= better / 2)} |")
    return lines


def _floors(results: dict[str, Any]) -> list[str]:
    """The floors (benchmarks/floors.py) beside the budget each target leaves, from this run's peer medians."""
    f = results["floors"]
    lines = ["What the parts of each path cost at least here (`benchmarks/floors.py`, measured in this run; p50 "
             "unless said), beside what each target allows (the budget, from this run's peer medians above). "
             "Where the floor is above the budget, no change to pgqueue's code on top of that part can meet the "
             "target on this machine.", "",
             "| target | budget | floor | floor above budget | what was measured |", "|---|---|---|---|---|"]

    def row(target: str, budget: float, floor: float, unit: str, digits: int, detail: str) -> None:
        above = "yes" if floor > budget else "no"
        lines.append(f"| {target} | {fmt(budget, digits)} {unit} | {fmt(floor, digits)} {unit} | {above} | {detail} |")

    if "latency" in results:
        better = min(_best(results, "latency", s, "p99_ms", lowest=True)[0] for s in ("procrastinate", "pgqueuer"))
        row("wake-up p99 at most half the better peer's", better / 2,
            f["notify"]["p50_ms"] + f["reserve_lean"]["p50_ms"], "ms", 2,
            f"notify delivery {fmt(f['notify']['p50_ms'], 2)} + the leanest reservation of one job after "
            f"{f['sizes']['gap']} s idle {fmt(f['reserve_lean']['p50_ms'], 2)} (its p99 "
            f"{fmt(f['reserve_lean']['p99_ms'], 2)}), both at p50; `pgqueue.reserve` so "
            f"{fmt(f['reserve']['p50_ms'], 2)}; "
            f"a durable commit {fmt(f['commit_warm']['p50_ms'], 2)} warm, {fmt(f['commit_cold']['p50_ms'], 2)} idle")
    single, bulk = f["single_us"], f["bulk_ms_per_1000"]
    for section, need, unit, digits, floor, detail in (
            ("single", 1.5, "µs per job", 0, single["insert_bare"],
             f"a bare INSERT into pgqueue.jobs with its NOTIFY, one transaction each; `pgqueue.enqueue` "
             f"{fmt(single['enqueue_function'])}, `client.dispatch` {fmt(single['dispatch'])}"),
            ("bulk", 2.0, "ms per 1,000", 1, bulk["copy"],
             f"COPY of rows rendered beforehand into pgqueue.jobs (no checks, no NOTIFY), server and transfer "
             f"only; encoding the jobs {fmt(bulk['encode'], 1)} more; `pgqueue.enqueue_many` "
             f"{fmt(bulk['enqueue_many_function'], 1)}, `client.dispatch_many` {fmt(bulk['dispatch_many'], 1)}")):
        if section in results:  # budget: µs per job, or ms per 1,000 jobs (the same number)
            best = max(_best(results, section, s, "jobs_per_s")[0] for s in ("procrastinate", "pgqueuer"))
            row(f"{section} enqueue {need:g}x the better peer", 1e6 / (need * best), floor, unit, digits, detail)
    if "drain" in results:
        need = 5 * _median(results, "drain", "pgqueuer/unlimited", "jobs_per_s")
        d = f["drain"]
        row(f"drain, best 5x PgQueuer's uncapped ({fmt(need)} jobs/s)", 1e6 * d["nproc"] / need,
            1e6 * d["machine_cpu_s_per_10k"] / 10_000, f"µs of CPU per job ({d['nproc']} cores)", 0,
            f"not a floor but pgqueue's cost now: the machine's busy CPU per job at concurrency "
            f"{d['concurrency']} (worker {fmt(1e6 * d['worker_cpu_s_per_10k'] / 10_000)}, the rest mostly the "
            f"server); {fmt(d['drain_jobs_per_s'])} jobs/s with the machine {fmt(d['machine_busy_pct'])}% busy")
    return lines


def _commit(env: dict[str, Any]) -> str:
    commit = env.get("commit_ms")
    if not commit:
        return "not measured"
    return (f"p50 {fmt(commit['commit_p50'], 2)} ms, p90 {fmt(commit['commit_p90'], 2)} ms "
            f"(a `select 1` round trip: p50 {fmt(commit['round_trip_p50'], 2)} ms; {commit['samples']} samples each)")


def _static_notes(results: dict[str, Any]) -> list[str]:
    pg = results.get("environment", {}).get("postgresql", {})
    notes = [
        "PgQueuer runs as its performance guide recommends (docs/guides/performance-tuning.md in "
        "the janbjorge/pgqueuer repository, published at janbjorge.github.io/pgqueuer: "
        "\"Use AsyncpgPoolDriver for producers; a single "
        "connection for QueueManager\", \"Always use a direct asyncpg connection (not a pool) for the "
        "QueueManager\"): the worker on one asyncpg connection (`AsyncpgDriver`), producers on an asyncpg "
        "pool (`Queries.from_asyncpg_pool`). `PgQueuer psycopg` rows run it on `PsycopgDriver` (one "
        "autocommit psycopg connection), which this harness used before: there the worker's LISTEN watcher "
        "loops on psycopg's `notifies(timeout=1.0, stop_after=1)`, which holds the connection's lock for the "
        "whole wait, so the dequeue that a notification triggers waits for the watcher's next wait to end "
        "(another notification or its 1 s timeout); that, not PgQueuer's design, is the ~80 ms wake-up "
        "reported earlier. procrastinate runs on `PsycopgConnector`, the async connector "
        "its documentation sets up.",
        "Documented faster settings not used for the headline figures: PgQueuer's `durability=volatile` "
        "(UNLOGGED tables; loses jobs on a crash) and procrastinate's `delete_jobs` (changes what is kept, "
        "not speed). procrastinate's `fetch_job_polling_interval` was tried (delayed-job lateness, "
        "`procrastinate poll0.5`); PgQueuer's default uncapped worker was tried (`PgQueuer unlimited`).",
        "Single-job enqueue is bound by the commit's fsync on this machine (fsync=on, "
        "synchronous_commit=on), so all systems land close together there.",
        "A generation-2 garbage collection of the benchmark process (which has all three systems loaded) "
        "takes about 30 ms and lands in some bulk runs and not in others (found with gc.callbacks); "
        "pgqueue's bulk call takes typed Job instances and returns UUID objects, both tracked by the "
        "collector; PgQueuer's takes and returns plain strings, bytes and integers.",
        "Latencies are wall-clock differences between two processes on one machine (time.time()); "
        "a value can be slightly negative when the handler starts before the producer's commit call returns.",
    ]
    if pg.get("autovacuum") == "off":
        notes.insert(0, "**autovacuum is off on this PostgreSQL server** (server-wide setting), so "
                        "pgqueue's per-table autovacuum settings never trigger. The pgqueue worker's table "
                        "maintenance (on by default: it checks every 2 s and runs `VACUUM pgqueue.jobs` when "
                        "autovacuum does not apply to the table) is what keeps the sustained run's table "
                        "small; its VACUUM runs are counted there. The peers have no such maintenance, and "
                        "their drain runs are too short for it to matter.")
    return notes


def write_report(results: dict[str, Any], out_dir: Path, report: Path) -> None:
    _RESULTS.clear()
    _RESULTS.update(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    plots: list[str] = []
    if any(s in results for s in ("single", "bulk", "drain")):
        plot_throughput(results, out_dir / "throughput.png")
        plots.append("throughput.png")
    if "latency" in results or "delayed" in results:
        plot_latency(results, out_dir / "latency.png")
        plots.append("latency.png")
    if "scaling" in results:
        plot_scaling(results, out_dir / "scaling.png")
        plots.append("scaling.png")
    if "sustained" in results and results["sustained"].get("samples"):
        plot_sustained(results, out_dir / "sustained.png")
        plots.append("sustained.png")

    env = results.get("environment", {})
    pg = env.get("postgresql", {})
    rel = out_dir.relative_to(report.parent)
    lines = [
        "# pgqueue benchmarks",
        "",
        "Reproduce with `uv run --group bench python -m benchmarks` (see [README.md](README.md)).",
        "Every figure is the **median** of the runs, with (min-max) beside it. Runs alternate",
        "between systems (A B C A B C ...). Each measurement starts from a fresh database with",
        "the system's schema installed by its own tooling.",
        "",
        "## Environment",
        "",
        f"- date: {env.get('date', '?')}; command: `{results.get('command', '?')}`",
        f"- machine: {env.get('nproc', '?')} CPUs ({env.get('cpu', '?')}), {env.get('memory_gib', '?')} GiB RAM, "
        f"{env.get('platform', '?')}, Python {env.get('python', '?')}",
        f"- load average at start / end: {results.get('load_start', '?')} / {results.get('load_end', '?')} "
        "(the machine is shared; other work ran during the benchmark)",
        f"- PostgreSQL: {pg.get('version', '?')}",
        "- commit latency (measured by the harness at the start: an autocommit `select txid_current()`, "
        "whose commit flushes WAL): " + _commit(env),
        "- settings: " + ", ".join(f"{k}={v}" for k, v in pg.items() if k != "version"),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items())
        + f"; pgqueue revision {env.get('pgqueue_revision', '?')}",
        f"- sizes: {results.get('sizes', {})}; scenarios: {results.get('scenario_sizes', {})}",
        f"- systems: {', '.join(_label(s) for s in env.get('systems', []))}",
        "",
    ]
    if results.get("failures"):
        lines += ["## FAILED cases (left out of every table below)", "",
                  *[f"- {failure}" for failure in results["failures"]], ""]
    lines += report_peers.targets(results)
    if any(s in results for s in ("drain", "single", "bulk", "latency")):
        lines += ["## Issue 18 targets (procrastinate and PgQueuer)", "", *_targets(results), ""]
    if "floors" in results:
        lines += ["## Floors", "", *_floors(results), ""]
    if "single" in results or "bulk" in results:
        lines += ["## Enqueue (jobs/s)", "",
                  "Single: one job per transaction, sequentially, as a web request does. Bulk: chunks of "
                  f"{results.get('sizes', {}).get('bulk_chunk', '?')} jobs per call.", "",
                  "| system | single enqueue | bulk enqueue |", "|---|---|---|"]
        for key in dict.fromkeys([*results.get("single", {}), *results.get("bulk", {})]):
            lines.append(f"| {_label(key)} | {cell(results.get('single', {}).get(key, {}).get('jobs_per_s'))} | "
                         f"{cell(results.get('bulk', {}).get(key, {}).get('jobs_per_s'))} |")
        lines += ["", "How each system enqueues:", "",
                  "- pgqueue: `async with conn.transaction(): await job.dispatch(conn, using=client)` on a psycopg "
                  "connection (the transactional-outbox case); `pgqueue push`: `await client.dispatch(job)` on the "
                  "client's own pool, one autocommit statement like the peers below; "
                  "bulk: `client.dispatch_many(jobs)`.",
                  "- procrastinate: `await task.defer_async(...)` (its pool, autocommit); bulk: "
                  "`task.batch_defer_async(*kwargs)`.",
                  "- PgQueuer: `await queries.enqueue(entrypoint, payload)` on an asyncpg pool "
                  "(`Queries.from_asyncpg_pool`, its performance guide's producer setup); `PgQueuer psycopg`: "
                  "on a psycopg autocommit connection (`PsycopgDriver`); bulk: `queries.enqueue([...], [...], "
                  "[...])`.", ""]
    if "drain" in results:
        lines += ["## Drain: N no-op async jobs, one worker process", "",
                  "jobs/s = handler starts per second between the first and the last job; *wall* also counts "
                  "the system's run() start-up and shutdown. Afterwards the database is checked: every job "
                  "completed exactly once (pgqueue: queue and failed_jobs empty; procrastinate: all "
                  "`succeeded` with one `started` event each; PgQueuer: queue empty, one `successful` log row "
                  "per job), and handler calls = distinct jobs = N.", "",
                  "| system / concurrency | jobs | jobs/s | wall jobs/s |", "|---|---|---|---|"]
        for key, figures in results["drain"].items():
            lines.append(f"| {_label(key)} | {fmt(figures['jobs']['median'])} | {cell(figures['jobs_per_s'])} | "
                         f"{cell(figures['wall_jobs_per_s'])} |")
        lines += ["", "Concurrency settings: pgqueue `client.worker(concurrency=c)`; procrastinate "
                  "`app.run_worker_async(concurrency=c, wait=False)`; PgQueuer `run(mode=drain, "
                  "max_concurrent_tasks=c, batch_size=min(10, c//2))` — PgQueuer requires "
                  "max_concurrent_tasks >= 2 x batch_size, so *c1* runs with batch_size 1 and a cap of 2. "
                  "`PgQueuer unlimited` is PgQueuer's default (no cap, batch_size 10); its worker runs on one "
                  "asyncpg connection (`AsyncpgDriver`). PgQueuer's entrypoint "
                  "`concurrency_limit` was tried first and is far slower here (a slot is freed only when "
                  "the status-log buffer flushes: 100 jobs took 25 s at limit 10), so it is not used.", ""]
    if "latency" in results:
        lines += ["## Wake-up latency of an idle worker (ms)", "",
                  "The worker runs in its own process; the producer enqueues one job every "
                  f"~{results.get('sizes', {}).get('latency_gap', '?')} s (random gap), each in its own "
                  "transaction, and notes time.time() when the commit returned; the handler reports "
                  "time.time() at its start through a pipe. Each system runs with its default concurrency "
                  "(pgqueue 10, procrastinate 1, PgQueuer no cap). PgQueuer's worker runs on `AsyncpgDriver`; "
                  "`PgQueuer psycopg` on `PsycopgDriver` (see the notes).", "",
                  "| system | p50 | p95 | p99 |", "|---|---|---|---|"]
        for key, figures in results["latency"].items():
            lines.append(f"| {_label(key)} | {cell(figures['p50_ms'], 1)} | {cell(figures['p95_ms'], 1)} | "
                         f"{cell(figures['p99_ms'], 1)} |")
        lines.append("")
    if "delayed" in results:
        lines += ["## Delayed-job lateness (ms)", "",
                  "While the worker idles, the producer enqueues jobs at random moments, each due 0.5-3 s "
                  "later; lateness = handler start - due time. `procrastinate poll0.5` sets the documented "
                  "`fetch_job_polling_interval` to 0.5 s (default 5 s), which bounds how late it notices a "
                  "scheduled job.", "",
                  "| system | p50 | p99 | max |", "|---|---|---|---|"]
        for key, figures in results["delayed"].items():
            lines.append(f"| {_label(key)} | {cell(figures['p50_ms'], 1)} | {cell(figures['p99_ms'], 1)} | "
                         f"{cell(figures['max_ms'], 1)} |")
        lines.append("")
    if "scaling" in results:
        lines += ["## pgqueue backlog scaling", "",
                  "Backlogs inserted with generate_series into pgqueue.jobs, shaped like real envelopes. "
                  "reserve = one `pgqueue.reserve(queues, 50, lease)` call, rolled back (median of probes); "
                  "drain = one worker at concurrency 50 processing `drained` jobs; the backlog is topped up "
                  "before each run.", "",
                  "| backlog | drained per run | reserve(50) ms | drain jobs/s | wall jobs/s |",
                  "|---|---|---|---|---|"]
        for label, figures in results["scaling"].items():
            lines.append(f"| {label} | {fmt(figures['drained'])} | {cell(figures['reserve_ms'], 2)} | "
                         f"{cell(figures['jobs_per_s'])} | {cell(figures['wall_jobs_per_s'])} |")
        labels = list(results["scaling"])
        if len(labels) >= 3:
            small = results["scaling"][labels[0]]["jobs_per_s"]["median"]
            big = results["scaling"][labels[2]]["jobs_per_s"]["median"]
            verdict = "met" if big >= 0.8 * small else "NOT met"
            lines += ["", f"Target (drain at {labels[2]} within 20% of {labels[0]}): {fmt(big)} vs {fmt(small)} "
                      f"jobs/s = {fmt(100 * big / small, 0)}% — {verdict}."]
        lines.append("")
    if "sustained" in results:
        s = results["sustained"]
        first, last = s["first_minute_jobs_per_s"], s["last_minute_jobs_per_s"]
        change = 100 * (last - first) / first if first else float("nan")
        samples = s.get("samples", [])
        lines += ["## pgqueue sustained load", "",
                  f"{s['minutes']} minutes; one producer (`dispatch_many` of {s['batch']} jobs, pausing while more "
                  f"than {s['backlog_cap']:,} rows wait) and one worker process at concurrency "
                  f"{s['concurrency']}, concurrently. Sampled every few seconds.", "",
                  f"- completed: {fmt(s['completed'])} jobs",
                  f"- throughput first minute: {fmt(first)} jobs/s; last minute: {fmt(last)} jobs/s "
                  f"({fmt(change, 1)}%; target: no drop beyond 10% — {'met' if change >= -10 else 'NOT met'})",
                  ]
        if samples:
            lines += [f"- table size: max {fmt(max(x['table_bytes'] for x in samples) / 2**20, 1)} MiB, "
                      f"end {fmt(samples[-1]['table_bytes'] / 2**20, 1)} MiB; dead tuples: max "
                      f"{fmt(max(x['dead_tuples'] for x in samples))}, end {fmt(samples[-1]['dead_tuples'])}; "
                      f"autovacuum runs: {fmt(samples[-1]['autovacuums'])}; VACUUM runs (worker maintenance): "
                      f"{fmt(samples[-1].get('vacuums'))}"]
        lines.append("")
    lines += result_wakeup.report(results)
    lines += workflows.report(results)
    lines += [*report_peers.server_cost(results), *report_peers.processes(results), *report_peers.held(results),
              *report_peers.xmin(results)]
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({rel}/{p})" for p in plots] + [""]
    notes = [*_static_notes(results), *report_peers.peer_notes(results), *results.get("notes", [])]
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    report.write_text("\n".join(lines))
