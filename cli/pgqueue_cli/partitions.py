"""Issue 28 in the CLI: the per-partition options of ``queue:limit`` and ``queue:status --partitions``."""

from __future__ import annotations

from dataclasses import dataclass

import pgqueue
from pgqueue import Client
from pgqueue_cli.render import table


@dataclass(frozen=True)
class PartitionOptions:
    """What ``queue:limit`` was given for partitions: the queue-wide values for every partition, or,
    with ``partition``, one partition's override (``--concurrency``, ``--rate``, ``--burst``, ``--weight``)."""

    partition: str | None = None
    per_partition_concurrency: int | None = None
    per_partition_rate: str | None = None
    per_partition_burst: int | None = None
    fair: bool | None = None
    weight: int | None = None
    #: ``MIN:MAX`` or ``off`` (``--per-partition-adaptive``).
    per_partition_adaptive: str | None = None

    def queue_wide(self) -> bool:
        """Whether any per-partition value for every partition of the queue was given."""
        return any(v is not None for v in (self.per_partition_concurrency, self.per_partition_rate,
                                           self.per_partition_burst, self.fair, self.per_partition_adaptive))


async def set_queue_wide(client: Client, queue: str, options: PartitionOptions,
                         current: pgqueue.QueueControl | None, connection: str) -> None:
    """Set the per-partition limits of ``queue``; a value not given keeps its current one."""
    rate = options.per_partition_rate
    if rate is None and current is not None and current.partition_rate_limit is not None \
            and current.partition_rate_period is not None:
        rate = pgqueue.format_rate(current.partition_rate_limit, current.partition_rate_period)
    keep = current or pgqueue.QueueControl(queue, False, None, None, None)
    held = None if keep.adaptive_min is None or keep.adaptive_max is None else (keep.adaptive_min, keep.adaptive_max)
    bounds = None if keep.partition_adaptive_min is None or keep.partition_adaptive_max is None \
        else (keep.partition_adaptive_min, keep.partition_adaptive_max)
    if options.per_partition_adaptive is not None:
        bounds = None if options.per_partition_adaptive == "off" else \
            pgqueue.parse_adaptive(options.per_partition_adaptive)
    await client.set_limits(
        queue, concurrency=keep.concurrency, rate_limit=keep.rate_limit, rate_period=keep.rate_period,
        burst=keep.burst, adaptive_decrease=keep.adaptive_decrease, per_partition_adaptive=bounds,
        per_partition_concurrency=(keep.partition_concurrency if options.per_partition_concurrency is None
                                   else options.per_partition_concurrency),
        per_partition_rate=rate,
        per_partition_burst=keep.partition_burst if options.per_partition_burst is None
        else options.per_partition_burst,
        fair=keep.fair if options.fair is None else options.fair, adaptive=held, connection=connection)


def partitions_table(queue: str, rows: list[pgqueue.PartitionStatus]) -> str:
    """The ``queue:status --partitions`` table of one queue (busiest first)."""
    if not rows:
        return f"queue {queue!r}: no partitions"
    headers = ["PARTITION", "RUNNING", "WAITING", "DELAYED", "CONCURRENCY", "RATE", "WEIGHT", "OVERRIDE"]
    return f"queue {queue!r}\n" + table(headers, [[
        r.partition, str(r.running), str(r.waiting), str(r.delayed),
        "-" if r.concurrency is None else str(r.concurrency) if r.adaptive_min is None
        else f"{r.concurrency} (adaptive {r.adaptive_min}:{r.adaptive_max})",
        "-" if r.rate_limit is None or r.rate_period is None else pgqueue.format_rate(r.rate_limit, r.rate_period),
        str(r.weight), "yes" if r.overridden else ""] for r in rows])


async def status(client: Client, connection: str, queue: str | None, limit: int) -> str:
    """Every queue's partitions (or ``queue``'s), as tables."""
    names = [queue] if queue is not None else sorted({s.queue for s in await client.stats(connection)}
                                                     | {c.queue for c in await client.controls(connection)})
    tables = [partitions_table(name, await client.partitions(name, limit=limit, connection=connection))
              for name in names]
    return "\n\n".join(tables) if tables else "no queues"
