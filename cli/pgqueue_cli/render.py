"""Plain-text output: aligned tables for queue statistics and failures, one failure in full."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from pgqueue import Client, FailedJob, QueueControl, QueueStats, ScheduleInfo


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


def status_table(stats: Sequence[QueueStats], workers: int | None) -> str:
    """The ``queue:status`` table, one row per queue, and the listening workers."""
    headers = ["QUEUE", "READY", "DELAYED", "RESERVED", "EXPIRED", "FAILED", "OLDEST READY"]
    rows = [[s.queue, str(s.ready), str(s.delayed), str(s.reserved), str(s.expired), str(s.failed),
             age(s.oldest_ready_age)] for s in stats]
    text = table(headers, rows) if rows else "no queued jobs and no failures recorded"
    if workers is not None:
        text += f"\nworkers listening: {workers}"
    return text


async def status(client: Client, connection: str) -> str:
    """The ``queue:status`` output of a connection's database, with paused queues and limits."""
    stats = await client.stats(connection)
    text = status_table(stats, await client.listening_workers(connection))
    controls = await client.controls(connection)
    paused = [c.queue for c in controls if c.paused]
    if paused:
        text += "\npaused: " + ", ".join(paused)
    for control in controls:
        if control.concurrency is not None or control.rate_limit is not None:
            text += "\n" + limits(control.queue, control)
    return text


def limits(name: str, control: QueueControl | None) -> str:
    """One line: a queue's global limits (``queue:limit``, ``queue:status``)."""
    parts = []
    if control is not None and control.concurrency is not None:
        parts.append(f"concurrency {control.concurrency}")
    if control is not None and control.rate_limit is not None and control.rate_period is not None:
        parts.append(f"rate {control.rate_limit}/{_period(control.rate_period)}, "
                     f"burst {control.rate_limit if control.burst is None else control.burst}")
    return f"limits of queue {name!r}: " + (", ".join(parts) if parts else "none")


def _period(seconds: float) -> str:
    named = {1.0: "s", 60.0: "min", 3600.0: "h"}
    return named.get(seconds, f"{seconds:g}s")


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
    """One failure in full: its facts, args, envelope and traceback."""
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
        _indent(json.dumps(failure.args, indent=2, sort_keys=True, default=str)),
        "envelope:",
        _indent(json.dumps(failure.envelope, indent=2, sort_keys=True, default=str)),
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
        rows.append([s.name, s.expression, s.timezone, last, s.next_tick.astimezone(zone).strftime(_LOCAL)])
    return table(headers, rows)
