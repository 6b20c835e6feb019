"""What a benchmark handler does: note that it ran (and when), nothing else."""

from __future__ import annotations

import mmap
import struct
import sys
import time


class Recorder:
    """Counts handler calls and distinct job numbers; in serve mode reports each start on stdout.

    With ``counter`` set (an 8-byte mmap), the call count is also kept there for a producer in
    another process (the held-depth scenario).
    """

    def __init__(self) -> None:
        self.calls = 0
        self.seen: set[int] = set()
        self.first: float | None = None
        self.last: float = 0.0
        self.report_each = False
        self.counter: mmap.mmap | None = None

    def hit(self, seq: int) -> None:
        now = time.time()
        if self.report_each:
            sys.stdout.write(f"hit {seq} {now!r}\n")
            sys.stdout.flush()
        self.calls += 1
        self.seen.add(seq)
        if self.counter is not None:
            struct.pack_into("q", self.counter, 0, self.calls)
        if self.first is None:
            self.first = now
        self.last = now


RECORDER = Recorder()
