"""pgqueue's benchmark suite: pgqueue side by side with procrastinate and PgQueuer.

Run everything with ``uv run --group bench python -m benchmarks`` (see README.md).
The library never imports this package; the peers live in the ``bench`` dependency group.
"""
