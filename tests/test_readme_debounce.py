"""The README's "Debounced jobs" section: its Python example runs (against a worker of the test's
database) and prints what its comments say; its SQL runs."""

from __future__ import annotations

import uuid

import psycopg

from pgqueue import Client
from tests.readme_support import run_example, section_blocks
from tests.worker_support import Runs, client, runs

__all__ = ["client", "runs"]


def _blocks(language: str) -> list[str]:
    return section_blocks("Debounced jobs", language)


async def test_the_python_example_prints_what_it_says(client: Client, runs: Runs) -> None:
    [block] = _blocks("python")
    runs.start(await client.worker(concurrency=2))
    _, printed = await run_example(block, "readme_debounce", client)  # the README's own code
    # The comments: the first print's line, then the handler's line, then the result.
    assert printed == ["False True True", "reindexing document 7 at version 3", "3"]


async def test_the_sql_runs(dsn: str) -> None:
    [block] = _blocks("sql")
    statements = [line for line in block.strip().splitlines() if not line.startswith("--")]
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(job_id, coalesced, _)] = conn.execute(statements[0].replace('"..."', f'"{uuid.uuid4()}"').encode()).fetchall()
        [(key, held_by, *_)] = conn.execute(statements[1].encode()).fetchall()
    assert (key, held_by, coalesced) == ("doc:7", job_id, False)
