"""The README's "Priority aging" section: its Python example runs and prints what its comment
says; its SQL runs and shows the setting."""

from __future__ import annotations

from datetime import timedelta

import psycopg

from pgqueue import Client
from tests.readme_support import run_example, section_blocks
from tests.worker_support import client, scalar

__all__ = ["client"]

TITLE = "Priority aging: low priorities run eventually"


async def test_the_python_example_prints_what_it_says(client: Client, dsn: str) -> None:
    [block] = section_blocks(TITLE, "python")
    _, printed = await run_example(block, "readme_aging", client)  # the README's own code
    assert printed == ["[('reports', 30.0)]"]
    assert await scalar(dsn, "select aging from pgqueue.queues where name = 'reports'") is None  # set back
    assert await scalar(dsn, "select count(*) from pgqueue.jobs where queue = 'reports'") == 2


def test_the_sql_runs(dsn: str) -> None:
    [block] = section_blocks(TITLE, "sql")
    statements = [line.split("--")[0] for line in block.strip().splitlines()]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statements[0].encode())
        assert conn.execute(statements[1].encode()).fetchall() == [("reports", timedelta(seconds=30))]
