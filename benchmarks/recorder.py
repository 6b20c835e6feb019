"""What a benchmark handler does: note that it ran (and when), nothing else."""

from __future__ import annotations

import sys
import time


class Recorder:
    """Counts handler calls and distinct job numbers; in serve mode reports each start on stdout."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: set[int] = set()
        self.first: float | None = None
        self.last: float = 0.0
        self.report_each = False

    def hit(self, seq: int) -> None:
        now = time.time()
        if self.report_each:
            sys.stdout.write(f"hit {seq} {now!r}\n")
            sys.stdout.flush()
        self.calls += 1
        self.seen.add(seq)
        if self.first is None:
            self.first = now
        self.last = now


RECORDER = Recorder()
