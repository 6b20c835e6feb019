"""The README's "Partitions: per-tenant limits and fair shares" section: its Python example runs as
written and prints what its comments say; each of its command lines and SQL statements runs, in the
order written, against the test's database."""

from __future__ import annotations

from pathlib import Path

import psycopg

from pgqueue import Client
from tests.cli_support import pgqueue
from tests.readme_support import run_example, section_blocks, section_commands, sql_statements
from tests.worker_support import client

__all__ = ["client"]

TITLE = "Partitions: per-tenant limits and fair shares"


async def test_the_python_example_prints_what_it_says(client: Client) -> None:
    [block] = section_blocks(TITLE, "python")
    _, printed = await run_example(block, "readme_partitions", client)  # the README's own code
    comments = [line.removeprefix("# ") for line in block.splitlines() if line.startswith("# ")
                and not line.startswith("# Each") and not line.startswith("# One")]
    assert printed == comments == ["tenant:big 0 3 0 20 10 3", "42 0 1 0 2 10 1", "tenant:42 0 1 0 2 10 1"]


def test_the_commands_and_the_sql_run(dsn: str, tmp_path: Path) -> None:
    commands = section_commands(TITLE)
    assert [c[0] for c in commands] == ["queue:limit"] * 4 + ["queue:status"]
    for args in commands:  # one after the other: each keeps what the one before set
        done = pgqueue(*args, "--dsn", dsn, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
    # tenant:big's fixed override (20) wins over the per-partition adaptive bounds: it does not adapt.
    assert "tenant:big" in done.stdout and "(adaptive" not in done.stdout
    [block] = section_blocks(TITLE, "sql")
    statements = sql_statements(block)
    assert len(statements) == 5
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())
        # fair: false, set_partition_limits' default
        assert conn.execute(b"select partition_concurrency, partition_adaptive_min, partition_fair "
                            b"from pgqueue.queues where name = 'orders'").fetchone() == (2, 1, False)
