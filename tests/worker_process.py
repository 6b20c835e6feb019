"""A worker process for the worker tests: ``python -m tests.worker_process --dsn ...``.

Builds a Client on ``--dsn`` (no pyproject.toml, no environment), imports the test jobs,
installs the SIGINT/SIGTERM handlers (unless ``--no-signal-handlers``) and runs one worker until
it is stopped. Prints the number of reservations processed on exit. Logs go to stderr at INFO,
so a test can see when the worker took a signal.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pgqueue import Client
from tests import worker_jobs  # noqa: F401  (registers the job types)
from tests.worker_support import settings_for


async def main(args: argparse.Namespace) -> int:
    overrides: dict[str, float] = {} if args.lease_margin is None else {"lease_margin": args.lease_margin}
    if args.timeout is not None:
        overrides["timeout"] = args.timeout
    async with Client(settings=settings_for(args.dsn, **overrides)) as client:
        worker = await client.worker(queues=args.queues.split(","), concurrency=args.concurrency,
                                    lease=args.lease, poll_interval=args.poll_interval, prefetch=args.prefetch)
        if not args.no_signal_handlers:
            worker.install_signal_handlers()
        processed = await worker.run()
    print(processed, flush=True)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.worker_process")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--queues", default="default")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--lease", type=float, default=None)
    parser.add_argument("--lease-margin", type=float, default=None)
    parser.add_argument("--timeout", type=float, default=None, help="the connection's job timeout")
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument("--no-signal-handlers", action="store_true",
                        help="leave SIGINT to Python (KeyboardInterrupt), as an application that runs a worker may")
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
