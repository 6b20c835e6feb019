"""Run a ``pgqueue`` command with Django's database (shared by the management commands)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from pgqueue.contrib.django import dsn
from pgqueue_cli.app import main


def run_cli(args: Sequence[str]) -> None:
    """``pgqueue ARGS`` in this process, its database the one of Django's ``PGQUEUE_DATABASE`` alias.

    The DSN goes in ``PGQUEUE_DSN`` (unless ``--dsn`` is given), so worker processes a supervisor
    starts inherit it. Exits as the command does.
    """
    os.environ["PGQUEUE_DSN"] = dsn()
    sys.argv = ["pgqueue", *args]
    main()
