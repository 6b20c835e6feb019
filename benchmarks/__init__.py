"""pgqueue's benchmark suite: pgqueue side by side with procrastinate, PgQueuer, awa, chancy, oban
and its own base revision.

Run everything with ``uv run --group bench python -m benchmarks`` (see README.md).
The library never imports this package; the peers live in the ``bench`` dependency group
(oban and the base revision in venvs the harness makes: benchmarks/peers.py).
"""
