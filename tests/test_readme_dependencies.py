"""The README's "Jobs that wait for jobs" section: its Python example runs (against a worker of
the test's database) and prints what its comments say; its SQL runs."""

from __future__ import annotations

import psycopg

from pgqueue import Client
from tests.readme_support import run_example, section_blocks
from tests.worker_support import Runs, client, runs

__all__ = ["client", "runs"]


def _blocks(language: str) -> list[str]:
    return section_blocks("Jobs that wait for jobs: dependencies, chains, groups, batches", language)


def _promised(block: str) -> list[str]:
    """What the example's comments say it prints: the comment after each `print(...)`."""
    return [line.split("# ", 1)[1].strip() for line in block.splitlines()
            if line.startswith("print(") and "# " in line]


async def test_the_python_example_prints_what_it_says(client: Client, runs: Runs, dsn: str) -> None:
    [block] = _blocks("python")
    runs.start(await client.worker(concurrency=4))
    namespace, printed = await run_example(block, "readme_dependencies", client)  # the README's own code
    assert printed == _promised(block)

    total, batch = namespace["total"], namespace["batch"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in _blocks("sql")[0].strip().splitlines():
            job_id = batch.id if "batch id" in statement else total
            if "job_dependencies" in statement:
                conn.execute(statement.encode()).fetchall()  # nothing waits any more: no row to expect
                continue
            found = conn.execute(statement.replace("<job id>", str(job_id)).replace(
                "<batch id>", str(job_id)).encode()).fetchall()
            assert found, statement
