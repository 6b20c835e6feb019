"""Plain-text output: aligned tables for queue statistics and failures, one failure in full."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from pgqueue import (
    DEFAULT_ADAPTIVE_DECREASE,
    Client,
    FailedJob,
    JobStatsRow,
    QueueControl,
    QueueStats,
    RegisteredWorker,
    ScheduleInfo,
    Throughput,
    format_rate,
)

#: The throughput windows ``queue:status`` shows, in minutes.
WINDOWS = (1, 5, 15)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces (numbers right-aligned)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def _is_number(text: str) -> bool:
    return text.replace(".", "", 1).isdigit() or text == "-"


def age(seconds: float | None) -> str:
    """A short human age: ``-``, ``850ms``, ``12.3s``, ``4m05s``, ``3h12m``, ``2d04h``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def status_table(stats: Sequence[QueueStats], workers: int | None,
                 throughput: Sequence[Throughput] = ()) -> str:
    """The ``queue:status`` table, one row per queue, and the listening workers.

    With ``throughput``: the jobs finished (succeeded or failed) per queue over the last 1, 5 and
    15 minutes; a queue that only has history gets a row too.
    """
    done: dict[str, dict[int, int]] = {}
    for t in throughput:
        done.setdefault(t.queue, {})[t.minutes] = t.succeeded + t.failed
    headers = ["QUEUE", "READY", "DELAYED", "BLOCKED", "RESERVED", "EXPIRED", "FAILED", "OLDEST READY"]
    if throughput:
        headers += [f"DONE {w}M" for w in WINDOWS]
    rows: list[list[str]] = []
    for s in stats:
        rows.append([s.queue, str(s.ready), str(s.delayed), str(s.blocked), str(s.reserved), str(s.expired),
                     str(s.failed),
                     age(s.oldest_ready_age)])
    for name in sorted(set(done) - {s.queue for s in stats}):
        rows.append([name, "0", "0", "0", "0", "0", "0", "-"])
    if throughput:
        for row in rows:
            row += [str(done.get(row[0], {}).get(w, 0)) for w in WINDOWS]
    text = table(headers, rows) if rows else "no queued jobs and no failures recorded"
    if workers is not None:
        text += f"\nworkers listening: {workers}"
    return text


async def status_data(client: Client, connection: str) -> dict[str, Any]:
    """The ``queue:status --json`` document (its shape is documented in the README)."""
    stats = {s.queue: s for s in await client.stats(connection)}
    controls = {c.queue: c for c in await client.controls(connection)}
    throughput = await client.throughput(WINDOWS, connection)
    windows: dict[str, dict[str, dict[str, int]]] = {}
    for t in throughput:
        windows.setdefault(t.queue, {})[str(t.minutes)] = {
            "succeeded": t.succeeded, "failed": t.failed, "retried": t.retried, "cancelled": t.cancelled}
    empty = {"succeeded": 0, "failed": 0, "retried": 0, "cancelled": 0}
    queues = []
    for name in sorted(set(stats) | set(windows) | set(controls)):
        s, c = stats.get(name), controls.get(name)
        queues.append({
            "queue": name,
            "ready": s.ready if s else 0, "delayed": s.delayed if s else 0, "blocked": s.blocked if s else 0,
            "reserved": s.reserved if s else 0,
            "expired": s.expired if s else 0, "failed": s.failed if s else 0,
            "oldest_ready_age": s.oldest_ready_age if s else None,
            "paused": c.paused if c else False,
            "concurrency": c.concurrency if c else None,
            "rate_limit": c.rate_limit if c else None,
            "rate_period": c.rate_period if c else None,
            "per_partition_concurrency": c.partition_concurrency if c else None,
            "per_partition_rate_limit": c.partition_rate_limit if c else None,
            "per_partition_rate_period": c.partition_rate_period if c else None,
            "fair": c.fair if c else False,
            "adaptive_min": c.adaptive_min if c else None, "adaptive_max": c.adaptive_max if c else None,
            "adaptive_decrease": c.adaptive_decrease if c else None,
            "per_partition_adaptive_min": c.partition_adaptive_min if c else None,
            "per_partition_adaptive_max": c.partition_adaptive_max if c else None,
            "aging_seconds": c.aging if c else None,
            "throughput": {str(w): windows.get(name, {}).get(str(w), empty) for w in WINDOWS},
        })
    flows = await client.workflow_counts(connection=connection)  # issue 27: at most 10,001 read
    return {"queues": queues, "workers_listening": await client.listening_workers(connection),
            "workflows": {**flows.states, "capped": flows.capped}}


def history_table(rows: Sequence[JobStatsRow]) -> str:
    """The ``queue:history`` table: one row per minute, queue and job name."""
    if not rows:
        return "no history in that range (pgqueue.job_stats is empty there)"
    headers = ["MINUTE", "QUEUE", "JOB", "SUCCEEDED", "FAILED", "RETRIED", "CANCELLED", "AVG RUN", "MAX RUN",
               "AVG LATENCY", "MAX LATENCY"]
    return table(headers, [[_stamp(r.minute), r.queue, r.name, str(r.succeeded), str(r.failed), str(r.retried),
                            str(r.cancelled), age(r.duration_avg), age(r.duration_max), age(r.latency_avg),
                            age(r.latency_max)] for r in rows])


async def status(client: Client, connection: str) -> str:
    """The ``queue:status`` output of a connection's database, with throughput, paused queues and limits."""
    stats = await client.stats(connection)
    throughput = await client.throughput(WINDOWS, connection)
    text = status_table(stats, await client.listening_workers(connection), throughput)
    controls = await client.controls(connection)
    paused = [c.queue for c in controls if c.paused]
    if paused:
        text += "\npaused: " + ", ".join(paused)
    for control in controls:
        if control.concurrency is not None or control.rate_limit is not None:
            text += "\n" + limits(control.queue, control)
        text += partition_limits(control) + aging(control)
    flows = await client.workflow_counts(connection=connection)  # issue 27: at most 10,001 read
    if flows.total:
        more = "+" if flows.capped else ""
        text += (f"\nworkflows: {flows.total:,}{more} live: "
                 + ", ".join(f"{n:,}{more} {state}" for state, n in flows.states.items() if n))
    return text


def limits(name: str, control: QueueControl | None) -> str:
    """One line: a queue's global limits (``queue:limit``, ``queue:status``)."""
    parts = []
    if control is not None and control.concurrency is not None:
        adaptive = "" if control.adaptive_min is None else \
            f" (adaptive {control.adaptive_min}:{control.adaptive_max}, now {control.concurrency}" \
            f"{_cut(control)})"
        parts.append(f"concurrency {control.concurrency}{adaptive}")
    if control is not None and control.rate_limit is not None and control.rate_period is not None:
        parts.append(f"rate {format_rate(control.rate_limit, control.rate_period)}, "
                     f"burst {control.rate_limit if control.burst is None else control.burst}")
    return f"limits of queue {name!r}: " + (", ".join(parts) if parts else "none")


def partition_limits(control: QueueControl | None) -> str:
    """One line: the limits every partition of the queue gets (empty when none)."""
    if control is None:
        return ""
    parts = []
    if control.partition_adaptive_min is not None:
        parts.append(f"concurrency adaptive {control.partition_adaptive_min}:{control.partition_adaptive_max} "
                     f"(each starts at {control.partition_concurrency}{_cut(control)})")
    elif control.partition_concurrency is not None:
        parts.append(f"concurrency {control.partition_concurrency}")
    if control.partition_rate_limit is not None and control.partition_rate_period is not None:
        burst = control.partition_rate_limit if control.partition_burst is None else control.partition_burst
        parts.append(f"rate {format_rate(control.partition_rate_limit, control.partition_rate_period)}, "
                     f"burst {burst}")
    if control.fair:
        parts.append("fair shares")
    return f"\nper partition of queue {control.queue!r}: " + ", ".join(parts) if parts else ""


def _cut(control: QueueControl) -> str:
    """``", cut x0.5"`` when a queue's adaptive limits are cut by another factor than the default."""
    return "" if control.adaptive_decrease == DEFAULT_ADAPTIVE_DECREASE else f", cut x{control.adaptive_decrease:g}"


def aging(control: QueueControl | None) -> str:
    """One line: a queue's priority aging (empty when none)."""
    if control is None or control.aging is None:
        return ""
    return f"\npriority aging of queue {control.queue!r}: one level per {control.aging:g} s waited"


def _stamp(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S%z")


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def failed_table(failures: Sequence[FailedJob]) -> str:
    """The ``queue:failed`` list: id, job, queue, attempts, reason, exception, failed_at."""
    if not failures:
        return "no failed jobs"
    headers = ["ID", "JOB", "QUEUE", "ATTEMPTS", "REASON", "EXCEPTION", "FAILED AT"]
    rows = []
    for f in failures:
        exception = f.exception.rsplit(".", 1)[-1] if f.exception else "-"
        if f.message:
            exception = f"{exception}: {f.message}"
        rows.append([str(f.id), f.name, f.queue, str(f.attempts), f.reason, _short(exception, 60), _stamp(f.failed_at)])
    return table(headers, rows)


def failed_detail(failure: FailedJob) -> str:
    """One failure in full: its facts, args, envelope and traceback (masked by the caller:
    :meth:`pgqueue.redaction.Redactor.failure`)."""
    lines = [
        f"failure id:  {failure.id}",
        f"job id:      {failure.job_id}",
        f"job:         {failure.name}",
        f"connection:  {failure.connection}",
        f"queue:       {failure.queue}",
        f"attempts:    {failure.attempts}",
        f"reason:      {failure.reason}",
        f"exception:   {failure.exception or '-'}",
        f"message:     {failure.message or '-'}",
        f"failed at:   {_stamp(failure.failed_at)}",
        "args:",
        _indent(json.dumps(failure.args, indent=2, sort_keys=True, default=str, ensure_ascii=False)),
        "envelope:",
        _indent(json.dumps(failure.envelope, indent=2, sort_keys=True, default=str, ensure_ascii=False)),
        "traceback:",
        _indent(failure.traceback.rstrip() if failure.traceback else "(none: decided before the handler ran)"),
        "",
        f"retry it with `pgqueue queue:retry {failure.id}`, or forget it with `pgqueue queue:forget {failure.id}`",
    ]
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


_LOCAL = "%Y-%m-%d %H:%M:%S%z"


def schedule_table(schedules: Sequence[ScheduleInfo]) -> str:
    """The ``schedule:list`` table: job, expression, timezone, last and next tick (in the timezone)."""
    headers = ["JOB", "SCHEDULE", "TIMEZONE", "LAST TICK", "NEXT TICK"]
    rows = []
    for s in schedules:
        zone = ZoneInfo(s.timezone)
        last = "-" if s.last_tick is None else s.last_tick.astimezone(zone).strftime(_LOCAL)
        upcoming = "-" if s.next_tick is None else s.next_tick.astimezone(zone).strftime(_LOCAL)
        rows.append([s.name, s.expression, s.timezone, last, upcoming])
    problems = [f"{s.name}: {s.problem}" for s in schedules if s.problem is not None]
    return "\n".join([table(headers, rows), *problems])


# --- issue 29: the operator's view ---
def workers_table(workers: Sequence[RegisteredWorker]) -> str:
    """The ``queue:workers`` table: one row per registered worker, then one per job it holds."""
    if not workers:
        return "no worker is registered in pgqueue.workers (none is running, or they predate revision 0009)"
    rows = []
    for w in workers:
        state = "gone" if w.gone else "alive"
        running = ", ".join(f"{j['name'] or '?'} {age(j['seconds'])}" for j in w.jobs) or "-"
        rows.append([w.host, str(w.pid), state, ",".join(w.queues), str(w.concurrency), str(w.prefetch), w.version,
                     _stamp(w.started_at), age(w.silent_seconds), str(len(w.jobs)), _short(running, 60)])
    return table(["host", "pid", "state", "queues", "concurrency", "prefetch", "version", "started",
                  "last heartbeat", "held", "jobs (for how long)"], rows)
