"""The per-queue counts every page shows, computed once so that the pages agree with each other.

A count is exact when reading it is cheap: below the cap of its index range, or when the table
is at most ``exact_pages`` pages (the whole table is then read, which costs no more than that
bound). Beyond, a count stopped at its cap is estimated from a random sample of the table's pages
(the same pages while the table is unchanged, so an idle backlog does not jitter), and only such
a count is marked "≈".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgqueue.store import QueueCounts

if TYPE_CHECKING:
    from pgqueue.dashboard.core import Dashboard

__all__ = ["STATES", "Cell", "Counted", "cells", "count_queues", "estimated", "round_estimate", "totals"]

STATES = ("ready", "delayed", "blocked", "reserved", "expired")
#: How far back job_stats is read for the queues that are idle now but have history (the day chart's span).
HISTORY_MINUTES = 1440


@dataclass(frozen=True)
class Cell:
    """One count as shown: its value, and whether it is exact, a lower bound or an estimate."""

    value: int
    kind: str = "exact"   # "exact", "at least" or "estimate"
    note: str = ""

    @property
    def text(self) -> str:
        """The count as the page prints it ("≈" only on an estimate)."""
        if self.kind == "estimate":
            return f"≈ {round_estimate(self.value):,}"
        return f"{self.value:,}+" if self.kind == "at least" else f"{self.value:,}"


def round_estimate(value: int) -> int:
    """Two significant digits: the precision a page sample has."""
    if value < 100:
        return value
    magnitude = 10 ** (len(str(value)) - 2)
    return int(round(value / magnitude) * magnitude)


Sample = tuple[float, dict[str, tuple[int, int, int, int, int]] | dict[str, tuple[int]]]


def estimated(value: int, seen: int | None, percent: float, cap: int) -> Cell:
    """A capped count from what a sample of ``percent`` of the pages saw: exact when the sample read
    every page, else an estimate never below ``value`` (what the capped count already saw)."""
    if seen is None or percent <= 0:
        return Cell(value, "at least", f"at least {value:,}: counting stopped at {cap:,}")
    if percent >= 100:
        return Cell(seen, "exact", "counted exactly: the table is small enough to read whole")
    # The exact part is a floor: a sample that saw fewer (sampling noise) does not lower it.
    return Cell(max(int(seen * 100 / percent), value), "estimate",
                f"estimated from a random sample of {percent:.2g}% of the table's pages "
                f"(exact counting stops at {cap:,})")


def cells(row: QueueCounts, sample: Sample | None, failed_sample: Sample | None, cap: int,
          failed_cap: int) -> dict[str, Cell]:
    """The cells of one queue's row: exact below the cap (or from a whole-table read), else estimated
    (or "N+" when no sample was taken)."""
    capped = {"ready": row.due_capped, "expired": row.due_capped, "delayed": row.later_capped,
              "blocked": row.blocked_capped,
              "reserved": row.later_capped}
    out: dict[str, Cell] = {}
    for index, state in enumerate(STATES):
        value = int(getattr(row, state))
        if not capped[state]:
            out[state] = Cell(value)
        elif sample is None:
            out[state] = estimated(value, None, 0, cap)
        else:
            seen = sample[1].get(row.queue)
            out[state] = estimated(value, 0 if seen is None else seen[index], sample[0], cap)
    if not row.failed_capped:
        out["failed"] = Cell(row.failed)
    elif failed_sample is None:
        out["failed"] = estimated(row.failed, None, 0, failed_cap)
    else:
        seen = failed_sample[1].get(row.queue)
        out["failed"] = estimated(row.failed, 0 if seen is None else seen[0], failed_sample[0], failed_cap)
    return out


def totals(rows: list[dict[str, Cell]]) -> dict[str, Cell]:
    """The footer: sums, as approximate as their least exact part ("jobs": the five states summed)."""
    out = {}
    for state in (*STATES, "failed"):
        parts = [r[state] for r in rows]
        out[state] = combined(parts)
    out["jobs"] = combined([out[state] for state in STATES])
    return out


def combined(parts: list[Cell]) -> Cell:
    """The sum of ``parts``: exact only if every part is."""
    kinds = {p.kind for p in parts}
    kind = "estimate" if "estimate" in kinds else "at least" if "at least" in kinds else "exact"
    return Cell(sum(p.value for p in parts), kind)


@dataclass(frozen=True)
class Counted:
    """Every queue's counts as the pages show them: rows by queue name, their totals, and whether
    any figure came from a sample (an estimate)."""

    rows: list[tuple[QueueCounts, dict[str, Cell]]]
    totals: dict[str, Cell]
    sampled: bool

    def of(self, queue: str | None) -> dict[str, Cell]:
        """The cells of one queue (zeros: it has nothing), with its "jobs" total; None: the totals."""
        if queue is None:
            return self.totals
        found = next((c for q, c in self.rows if q.queue == queue), None)
        if found is None:
            return totals([])
        return {**found, "jobs": combined([found[state] for state in STATES])}


def idle(queue: str) -> QueueCounts:
    """The counts of a queue with nothing in it (it has controls or history)."""
    return QueueCounts(queue, 0, 0, 0, 0, 0, False, False, False, None)


def sample_pages(table_pages: int, sample: int, exact: int) -> int:
    """How many pages to ask the sample for: more than the whole table when it is at most ``exact``
    pages (the sample then reads all of it: 100%, whatever it grew by since its size was read), else
    ``sample``."""
    return max(2 * table_pages + 1, sample) if table_pages <= exact else sample


async def count_queues(dash: Dashboard, also: Iterable[str] = ()) -> Counted:
    """The counts of every queue with jobs or failures, plus the queues named in ``also`` and those
    with outcomes in the last day (idle ones show zeros instead of vanishing)."""
    store = await dash.store()
    options = dash.options
    queues, pages, history = await asyncio.gather(
        store.queue_counts(options.count_cap, options.failed_count_cap), store.table_pages(),
        store.history_queues(HISTORY_MINUTES))
    # A sample costs its pages: taken only when an exact count stopped at its cap.
    jobs_capped = any(q.due_capped or q.later_capped or q.blocked_capped for q in queues)
    failed_capped = any(q.failed_capped for q in queues)
    sample: Sample | None = None
    failed_sample: Sample | None = None
    jobs_pages = sample_pages(pages["jobs"], options.sample_pages, options.exact_pages)
    failed_pages = sample_pages(pages["failed_jobs"], options.sample_pages, options.exact_pages)
    if jobs_capped and failed_capped:
        sample, (percent, seen) = await asyncio.gather(store.queue_sample(jobs_pages),
                                                       store.failed_sample(failed_pages))
        failed_sample = (percent, {queue: (n,) for queue, n in seen.items()})
    elif jobs_capped:
        sample = await store.queue_sample(jobs_pages)
    elif failed_capped:
        percent, seen = await store.failed_sample(failed_pages)
        failed_sample = (percent, {queue: (n,) for queue, n in seen.items()})
    known = {q.queue for q in queues}
    every = sorted(queues + [idle(name) for name in {*also, *history} - known], key=lambda q: q.queue)
    rows = [(q, cells(q, sample, failed_sample, options.count_cap, options.failed_count_cap)) for q in every]
    sampled = any(c.kind == "estimate" for _, row in rows for c in row.values())
    return Counted(rows, totals([c for _, c in rows]), sampled)
