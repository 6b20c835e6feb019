"""A worker process for the fault tests: ``python -m tests.faults.worker_main --dsn ...``.

Builds a :class:`pgqueue.Client`, imports the fault jobs, runs one worker with signal
handlers installed and prints its stats as one JSON line on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import signal
import sys
from dataclasses import asdict
from pathlib import Path

import pgqueue
from tests.faults import fault_jobs

TASKS_MARK = "--- worker_main: tasks"


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="worker_main")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--pyproject", default="/nonexistent/pyproject.toml")
    parser.add_argument("--connection", default=None)
    parser.add_argument("--queues", default="default")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--listen-dsn", default=None)
    parser.add_argument("--stop-when-empty", action="store_true")
    parser.add_argument("--prefetch", type=int, default=None, help="the worker's prefetch (default: its own)")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        help="a module of more job types to register (e.g. tests.faults.workflow_jobs)")
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> int:
    for module in args.imports:
        importlib.import_module(module)
    settings = pgqueue.load_settings(Path(args.pyproject), dsn=args.dsn, environ={})
    client = pgqueue.Client(settings=settings)
    try:
        worker = await client.worker(args.connection, queues=args.queues.split(","), concurrency=args.concurrency,
                                    poll_interval=args.poll_interval, listen_dsn=args.listen_dsn,
                                    prefetch=args.prefetch)
        worker.install_signal_handlers()
        # SIGUSR1: print where every task is (the harness sends it to a worker that does not stop in time).
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _print_tasks)
        await worker.run(stop_when_empty=args.stop_when_empty)
        print(json.dumps({"stats": asdict(worker.stats), "acked": worker.completer.acked,
                          "refused": worker.completer.refused}), flush=True)
    finally:
        await fault_jobs.close_ledger()
        await client.close()
    return 0


def _print_tasks() -> None:
    print(f"{TASKS_MARK} ({len(asyncio.all_tasks())})", file=sys.stderr)
    for task in asyncio.all_tasks():
        task.print_stack(limit=12, file=sys.stderr)
    print(f"{TASKS_MARK} end", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run one worker until it is stopped (SIGTERM/SIGINT) or, with --stop-when-empty, idle."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    return asyncio.run(_main(_arguments(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
