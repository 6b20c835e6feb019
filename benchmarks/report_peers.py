"""RESULTS.md sections of issue 31: the stronger peers, the database's cost per job, many processes,
a held depth, a pinned xmin, and the issue's targets, each from the same run's medians."""

from __future__ import annotations

import itertools
import math
from typing import Any

from benchmarks.systems import LABELS, PEERS

NAN = float("nan")


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def label(key: str, results: dict[str, Any]) -> str:
    """``pgqueue@db1473d c10`` for ``pgqueue_base/c10``: the base revision by its name."""
    system, *rest = key.split("/")
    name = LABELS.get(system, system)
    if system == "pgqueue_base":
        name = f"pgqueue@{results.get('environment', {}).get('base_rev', 'base')}"
    return " ".join([name, *rest])


def _med(results: dict[str, Any], section: str, key: str, figure: str) -> float:
    try:
        return float(results[section][key][figure]["median"])
    except (KeyError, TypeError):
        return NAN


def _best(results: dict[str, Any], section: str, systems: tuple[str, ...] | list[str], figure: str,
          lowest: bool = False, match: str = "") -> tuple[float, str]:
    """The best median of ``figure`` over the keys of ``systems`` (containing ``match``) in ``section``."""
    found = [(float(v[figure]["median"]), k) for k, v in results.get(section, {}).items()
             if k.split("/")[0] in systems and figure in v and match in k
             and not math.isnan(float(v[figure]["median"]))]
    if not found:
        return NAN, "-"
    return min(found) if lowest else max(found)


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) and not math.isnan(a) else NAN


def _verdict(*met: bool) -> str:
    return "yes" if all(met) else "NO"


# --------------------------------------------------------------------- targets
def targets(results: dict[str, Any]) -> list[str]:
    """Issue 31's targets, pgqueue against the best peer of this run (and its own base revision)."""
    lines = ["## Issue 31 targets", "",
             "Each against the best peer of this run (oban, awa, chancy, PgQueuer, procrastinate), same concurrency "
             "where one is set; `best peer` names it.", "",
             "| target | pgqueue | best peer | ratio | met |", "|---|---|---|---|---|"]

    def row(target: str, ours: float, peer: tuple[float, str], need: float, lower_is_better: bool = False,
            digits: int = 0) -> None:
        r = _ratio(peer[0], ours) if lower_is_better else _ratio(ours, peer[0])
        met = not math.isnan(r) and r >= need
        lines.append(f"| {target} | {_fmt(ours, digits)} | {_fmt(peer[0], digits)} ({label(peer[1], results)}) | "
                     f"{_fmt(r, 2)}x | {_verdict(met)} |")

    for c in (10, 50):
        if "drain" in results:
            row(f"drain c{c}, jobs/s (need 5x)", _med(results, "drain", f"pgqueue/c{c}", "jobs_per_s"),
                _best(results, "drain", PEERS, "jobs_per_s", match=f"/c{c}"), 5)
    if "bulk" in results:
        row("bulk enqueue, jobs/s (need 1.5x)", _best(results, "bulk", ("pgqueue",), "jobs_per_s")[0],
            _best(results, "bulk", PEERS, "jobs_per_s"), 1.5)
    if "single" in results:
        row("single enqueue, jobs/s (need 1.2x)", _best(results, "single", ("pgqueue",), "jobs_per_s")[0],
            _best(results, "single", PEERS, "jobs_per_s"), 1.2)
    if "drain" in results:
        row("server CPU per job, drain c10, µs (need ≤ 0.5x: ratio = peer / pgqueue ≥ 2)",
            _med(results, "drain", "pgqueue/c10", "server_cpu_us_per_job"),
            _best(results, "drain", PEERS, "server_cpu_us_per_job", lowest=True, match="/c10"), 2, True, 1)
    if "bulk" in results:
        row("server CPU per job, bulk, µs (need ≤ 0.5x: ratio ≥ 2)",
            _med(results, "bulk", "pgqueue", "server_cpu_us_per_job"),
            _best(results, "bulk", PEERS, "server_cpu_us_per_job", lowest=True), 2, True, 1)
    if "bulk" in results and "drain" in results:
        wal = {s: _med(results, "bulk", s, "wal_bytes_per_job") + _med(results, "drain", f"{s}/c10",
                                                                       "wal_bytes_per_job")
               for s in ("pgqueue", *PEERS)}
        peers = [(v, s) for s, v in wal.items() if s != "pgqueue" and not math.isnan(v)]
        row("WAL per job, bulk enqueue + drain c10, bytes (need ≤ the lowest peer's: ratio ≥ 1)", wal["pgqueue"],
            min(peers) if peers else (NAN, "-"), 1, True)
    if "processes" in results:
        row("best drain on this machine, any processes/concurrency, jobs/s (need 3x the best peer's best)",
            _best(results, "processes", ("pgqueue",), "jobs_per_s")[0],
            _best(results, "processes", PEERS, "jobs_per_s"), 3)
    if "held" in results:
        for placement in ("same", "split"):
            ours = _med(results, "held", f"pgqueue/{placement}", "jobs_per_s")
            row(f"held depth ({placement} process), jobs/s (need 1.5x every peer)", ours,
                _best(results, "held", PEERS, "jobs_per_s", match=f"/{placement}"), 1.5)
            base = _med(results, "held", f"pgqueue_base/{placement}", "jobs_per_s")
            r = _ratio(ours, base)
            lines.append(f"| held depth ({placement} process) vs this issue's base revision (need 1.4x) | "
                         f"{_fmt(ours)} | {_fmt(base)} ({label('pgqueue_base', results)}) | {_fmt(r, 2)}x | "
                         f"{_verdict(not math.isnan(r) and r >= 1.4)} |")
    if "xmin" in results:
        clean = _med(results, "xmin", "pgqueue", "clean_pickup_p99_ms")
        for phase in ("pinned", "after"):
            p99 = _med(results, "xmin", "pgqueue", f"{phase}_pickup_p99_ms")
            r = _ratio(p99, clean)
            lines.append(f"| pinned xmin: pickup p99 {phase} within 2x of clean ({_fmt(clean, 1)} ms) | "
                         f"{_fmt(p99, 1)} ms | - | {_fmt(r, 2)}x clean | {_verdict(not math.isnan(r) and r <= 2)} |")
    lines.append("")
    return lines


# ----------------------------------------------------------------- server cost
def server_cost(results: dict[str, Any]) -> list[str]:
    if "drain" not in results and "bulk" not in results:
        return []
    lines = ["## The database's cost per job", "",
             "The CPU of every PostgreSQL process of the measured database (its backends) and of the server's "
             "background writer, WAL writer and checkpointer, from /proc/<pid>/stat sampled every 50 ms "
             "(`benchmarks/server_cost.py`), and the WAL written (pg_current_wal_lsn before and after; full-page "
             "images from pg_stat_wal, their bytes from pg_walinspect where it can read the segments), per job, "
             "for the drain at concurrency 10 and 50 and for the bulk enqueue. WAL and the background processes "
             "are the server's: anything else it ran at the time counts too (see the load average above; a "
             "CREATE DATABASE by anyone on PostgreSQL 15 writes the whole template to WAL).", "",
             "| system | phase | jobs/s | server CPU µs/job (backends + background) | server busy % | WAL B/job | "
             "FPI per 1,000 jobs | FPI bytes/job (share) |", "|---|---|---|---|---|---|---|---|"]
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for key, figures in results.get("drain", {}).items():
        if "/c10" in key or "/c50" in key:
            rows.append((key, "drain " + key.split("/")[-1], figures))
    for key, figures in results.get("bulk", {}).items():
        rows.append((key, "bulk enqueue", figures))
    rows.sort(key=lambda r: (r[1], r[0]))
    for key, phase, f in rows:
        if "server_cpu_us_per_job" not in f:
            continue

        def m(name: str, figures: dict[str, Any] = f) -> float:
            return float(figures.get(name, {}).get("median", NAN))

        lines.append(f"| {label(key, results)} | {phase} | {_fmt(m('jobs_per_s'))} | "
                     f"**{_fmt(m('server_cpu_us_per_job'), 1)}** ({_fmt(m('backend_cpu_us_per_job'), 1)} + "
                     f"{_fmt(m('background_cpu_us_per_job'), 1)}) | {_fmt(m('server_cpu_busy_pct'))} | "
                     f"{_fmt(m('wal_bytes_per_job'))} | {_fmt(m('fpi_per_1000_jobs'), 1)} | "
                     f"{_fmt(m('fpi_bytes_per_job'))} ({_fmt(m('fpi_share_pct'))}%) |")
    lines += ["", "**Jobs/s one PostgreSQL core serves with the workers on other hosts** (1 s of server CPU divided "
              "by the server CPU one job costs: its bulk enqueue plus its drain at concurrency 10; the drain alone "
              "beside it):", "", "| system | enqueue + drain, jobs/s per core | drain alone, jobs/s per core |",
              "|---|---|---|"]
    for system in ("pgqueue", "pgqueue_base", *PEERS):
        drain_us = _med(results, "drain", f"{system}/c10", "server_cpu_us_per_job")
        bulk_us = _med(results, "bulk", system, "server_cpu_us_per_job")
        if math.isnan(drain_us) and math.isnan(bulk_us):
            continue
        lines.append(f"| {label(system, results)} | {_fmt(1e6 / (drain_us + bulk_us) if drain_us + bulk_us else NAN)}"
                     f" | {_fmt(1e6 / drain_us if drain_us else NAN)} |")
    lines.append("")
    return lines


# ------------------------------------------------------------------- processes
def processes(results: dict[str, Any]) -> list[str]:
    section = results.get("processes")
    if not section:
        return []
    lines = ["## Many processes, and the best of each system", "",
             "A drain of the same backlog by each system scaled the way its documentation scales it on one host: "
             "pgqueue with `pgqueue queue:work --processes P --concurrency 50` (the real CLI and supervisor), "
             "procrastinate and PgQueuer as P worker processes (PgQueuer uncapped, procrastinate at concurrency "
             "50), awa, chancy and oban as one process at a higher concurrency (oban's queue limit, awa's "
             "max_workers, chancy's queue concurrency). Every job checked completed once. Where a curve stops "
             "rising, the server's CPU (busy % of one core; the machine has "
             f"{results.get('environment', {}).get('nproc', '?')}), WAL and lock waits (share of active-backend "
             "samples waiting on a lock or LWLock) say why.", "",
             "| system | processes | concurrency | jobs/s | server busy % | server CPU µs/job | WAL B/job | "
             "lock waits % |", "|---|---|---|---|---|---|---|---|"]
    for key, f in section.items():
        system, variant, conc = key.split("/")

        def m(name: str, figures: dict[str, Any] = f) -> float:
            return float(figures.get(name, {}).get("median", NAN))

        shown = "uncapped" if system == "pgqueuer" else conc[1:]  # PgQueuer's processes run its default
        lines.append(f"| {label(system, results)} | {variant[1:]} | {shown} | **{_fmt(m('jobs_per_s'))}** | "
                     f"{_fmt(m('server_cpu_busy_pct'))} | {_fmt(m('server_cpu_us_per_job'), 1)} | "
                     f"{_fmt(m('wal_bytes_per_job'))} | {_fmt(m('lock_wait_pct'), 1)} |")
    lines += ["", "Each system's best here, and the first step of its curve that gained less than 10% (with what "
              "the server was doing there):", ""]
    by_system: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for key, f in section.items():
        by_system.setdefault(key.split("/")[0], []).append((key, f))
    for system, steps in by_system.items():
        def rate(step: tuple[str, dict[str, Any]]) -> float:
            return float(step[1]["jobs_per_s"]["median"])

        best = max(steps, key=rate)
        bend = "its curve rose at every step measured"
        for before, after in itertools.pairwise(steps):
            if rate(after) < 1.1 * rate(before):
                f = after[1]
                bend = (f"bends at {'/'.join(after[0].split('/')[1:])} ({_fmt(rate(before))} -> {_fmt(rate(after))} "
                        f"jobs/s; server busy {_fmt(f['server_cpu_busy_pct']['median'])}% of a core, "
                        f"{_fmt(f['server_cpu_us_per_job']['median'], 1)} µs/job, WAL "
                        f"{_fmt(f['wal_bytes_per_job']['median'])} B/job, lock waits "
                        f"{_fmt(f['lock_wait_pct']['median'], 1)}%)")
                break
        lines.append(f"- {label(system, results)}: best {_fmt(rate(best))} jobs/s "
                     f"({'/'.join(best[0].split('/')[1:])}); {bend}.")
    lines.append("")
    return lines


# ------------------------------------------------------------------------ held
def held(results: dict[str, Any]) -> list[str]:
    section = results.get("held")
    if not section:
        return []
    sizes = results.get("scenario_sizes", {})
    lines = ["## Producing and consuming at once (held depth)", "",
             f"{sizes.get('held_depth', '?')} ready jobs kept queued while one producer enqueues in batches of "
             f"{sizes.get('held_batch', '?')} (each system's bulk call) and {sizes.get('held_concurrency', '?')} "
             f"handlers consume, for {sizes.get('held_seconds', '?')} s after a {sizes.get('held_warmup', '?')} s "
             "warm-up; *same*: producer and worker in one process, *split*: in two (the depth read from the "
             "worker's handler count through a shared file). jobs/s = jobs consumed per second in the window.", "",
             "| system | placement | jobs/s consumed | produced/s | mean depth |", "|---|---|---|---|---|"]
    for key, f in section.items():
        system, placement = key.split("/")
        lines.append(f"| {label(system, results)} | {placement} | **{_fmt(f['jobs_per_s']['median'])}** | "
                     f"{_fmt(f['produced_per_s']['median'])} | {_fmt(f['depth_mean']['median'])} |")
    lines.append("")
    return lines


# ------------------------------------------------------------------------ xmin
def xmin(results: dict[str, Any]) -> list[str]:
    section = results.get("xmin")
    if not section:
        return []
    s = results.get("scenario_sizes", {})
    lines = ["## A pinned xmin", "",
             f"Jobs produced at {_fmt(s.get('xmin_rate'))} jobs/s (batches of {s.get('xmin_batch', '?')} on a fixed "
             f"schedule) and consumed by {s.get('xmin_concurrency', '?')} handlers: {_fmt(s.get('xmin_clean'))} s "
             f"clean, then another session holds a transaction with an xid (`select txid_current()`, on the "
             f"same database) for {_fmt(s.get('xmin_pinned'))} s, then {_fmt(s.get('xmin_after'))} s after its "
             "release. Pickup = the commit of the job's batch -> its handler's start. Dead tuples: the peak of "
             "n_dead_tup over the system's tables, sampled every second; sizes (table, indexes) at the end of "
             "the phase. *backlog at the end*: jobs produced but not yet started when the producer stopped "
             "(a system that could not hold the rate); *never picked up*: still not started a minute later.", "",
             "| system | phase | jobs/s | pickup p50 ms | pickup p99 ms | dead tuples (peak) | tables MiB | "
             "indexes MiB |", "|---|---|---|---|---|---|---|---|"]
    for key, f in section.items():
        for phase in ("clean", "pinned", "after"):
            def m(name: str, figures: dict[str, Any] = f, p: str = phase) -> float:
                return float(figures.get(f"{p}_{name}", {}).get("median", NAN))

            lines.append(f"| {label(key, results)} | {phase} | {_fmt(m('jobs_per_s'))} | "
                         f"{_fmt(m('pickup_p50_ms'), 1)} | **{_fmt(m('pickup_p99_ms'), 1)}** | "
                         f"{_fmt(m('dead_tuples_peak'))} | {_fmt(m('table_mib'), 1)} | {_fmt(m('index_mib'), 1)} |")
        lines.append(f"| {label(key, results)} | backlog at the end / never picked up | "
                     f"{_fmt(f.get('backlog_at_end', {}).get('median'))} / "
                     f"{_fmt(f.get('never_picked_up', {}).get('median'))} | | | | | |")
    lines.append("")
    return lines


def peer_notes(results: dict[str, Any]) -> list[str]:
    """How each of issue 31's peers runs, with the documentation it follows."""
    env = results.get("environment", {})
    notes = [
        "awa (awa-pg, Rust core, Python SDK): `awa.AsyncClient` on a postgresql:// URL; schema by "
        "`client.migrate()` (what `python -m awa migrate` runs) and `client.install_queue_storage()` (its "
        "queue-storage engine made active, as a fresh install's first worker does; `enqueue_many_copy` "
        "refuses without it); bulk `enqueue_many_copy` (its README: \"COPY ingestion ... for high-volume Python "
        "producers\"); worker `client.start([(queue, c)])` (docs/configuration.md: hard-reserved mode, "
        "max_workers = c, NOTIFY with a 200 ms poll fallback). awa moves finished jobs out of its queue storage "
        "within seconds, so a drain is checked through its own counters (`queue_stats()`: completed in the last "
        "hour = N, nothing queued, running or failed) and the handler calls (N, all distinct).",
        "chancy: `Chancy(dsn)` with its default plugins; the queue declared with `executor=Chancy.Executor.Async` "
        "(AsyncExecutor's docstring: for \"large numbers of IO-bound jobs\"; the default ProcessExecutor forks) "
        "and `eager_polling=True` (Queue docs: poll again as soon as a job completes instead of every 5 s "
        "polling interval, the only way it drains a backlog at speed); concurrency = the queue's concurrency; "
        "bulk `push_many` (one transaction per 1,000 jobs). Its logger is set to WARNING: at INFO it writes a "
        "line per job pulled.",
        f"oban {env.get('versions', {}).get('oban', '?')} (the Python port; Python >= 3.12, so it runs in a venv "
        "the harness makes with `uv venv` and installs from the package index, producer and worker both driven "
        "through subprocesses): `Oban(pool=Oban.create_pool(dsn), queues={queue: c})` as its README starts it "
        "(the pool grown to c when c > 10); schema by `oban.schema.install` (what `oban install` runs); bulk "
        "`oban.enqueue_many` (one INSERT); oban has no drain mode, so the worker stops (`oban.stop()`, which "
        "flushes its acks) once N handlers ran; checked in oban_jobs (N completed, one attempt each).",
        "Documented knobs not used for these figures: awa's `PartitionedQueue` and `awa.queue_meta.enqueue_shards` "
        "(its README: they trade strict FIFO for throughput on one hot queue, which no other system here gives "
        "up) and its `queue_storage_queue_stripe_count`; chancy's `polling_interval` (moot with eager_polling "
        "for a backlog); oban's Pro engine (paid: bulk acks, multi-process).",
        f"pgqueue@{env.get('base_rev', '?')} ({env.get('base_commit', '')[:12] or '?'}): this issue's base "
        "revision, from a git worktree of it with its own venv (the library installed as a wheel), so before "
        "and after are in the same interleaved run.",
    ]
    left_out = env.get("left_out") or {}
    notes += [f"{LABELS.get(s, s)} was left out of this run: {why}" for s, why in left_out.items()]
    return notes
