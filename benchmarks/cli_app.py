"""The job module of ``pgqueue queue:work --app benchmarks.cli_app`` in the processes scenario.

It registers the benchmark's no-op job (``bench:noop``) and, as each worker process exits,
writes what its handlers saw to ``$PGQUEUE_BENCH_RESULTS/<pid>.json`` (calls, the job numbers,
first and last handler start), so that the harness can check across processes that every job
ran exactly once and time the drain from the first handler start to the last.
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

from benchmarks.recorder import RECORDER
from benchmarks.systems import pgqueue_job

Noop = pgqueue_job()


def _write_results() -> None:
    folder = os.environ.get("PGQUEUE_BENCH_RESULTS")
    if not folder or RECORDER.calls == 0:
        return
    result = {"calls": RECORDER.calls, "seen": sorted(RECORDER.seen), "first": RECORDER.first, "last": RECORDER.last}
    (Path(folder) / f"{os.getpid()}.json").write_text(json.dumps(result))


atexit.register(_write_results)
