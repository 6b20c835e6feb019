"""The README's "Adaptive limits: let the downstream set the concurrency" section (under Control): its
Python example runs as written against a worker of the test's database (its fake partner API answers
backpressure above 3 calls at once) and prints what its comments say; each of its command lines
and SQL statements runs, in the order written."""

from __future__ import annotations

from pathlib import Path

import psycopg

from pgqueue import Client
from tests.cli_support import pgqueue
from tests.readme_support import run_example, section_blocks, section_commands, sql_statements
from tests.worker_support import Runs, client, runs

__all__ = ["client", "runs"]

TITLE = "Adaptive limits: let the downstream set the concurrency"


async def test_the_python_example_prints_what_it_says(client: Client, runs: Runs) -> None:
    [block] = section_blocks(TITLE, "python", level=3)
    runs.start(await client.worker(queues=("partner",), concurrency=10, schedules=False))
    namespace, printed = await run_example(block, "readme_adaptive", client)  # the README's own code
    assert printed == ["10 2 50 0.9", "435", "True", "[('tenant:big', 5, 5, 100)]"]
    assert namespace["partner_api"].locked() is False  # every call of the fake API has ended


def test_the_commands_and_the_sql_run(dsn: str, tmp_path: Path) -> None:
    commands = section_commands(TITLE, level=3)
    assert len(commands) == 7
    outputs = []
    for args in commands:  # one after the other: each keeps what the one before set
        done = pgqueue(*args, "--dsn", dsn, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        outputs.append(done.stdout)
    assert "limits of queue 'partner': concurrency 10 (adaptive 2:50, now 10)" in outputs[0]
    assert "(adaptive 2:50, now 10, cut x0.5)" in outputs[1]
    assert "per partition of queue 'tenants': concurrency adaptive 1:20 (each starts at 4)" in outputs[3]
    assert "override adaptive 5:100" in outputs[4]
    assert "5 (adaptive 5:100)" in outputs[6]
    [block] = section_blocks(TITLE, "sql", level=3)
    statements = sql_statements(block)
    assert len(statements) == 7
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = [conn.execute(statement.encode()).fetchall() for statement in statements]
    assert [row[0] for row in found[2]] == ["partner"]
    assert [(r[0], r[1], r[2], r[3]) for r in found[5]] == [("tenant:big", 5, 5, 100)]
