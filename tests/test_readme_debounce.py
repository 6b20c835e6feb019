"""The README's "Debounced jobs" section: its Python example runs (against a worker of the test's
database) and prints what its comments say; its SQL runs."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
import types
import uuid
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import Client
from tests.worker_support import Runs, client, finish, runs

__all__ = ["client", "runs"]

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(language: str) -> list[str]:
    text = README.read_text()
    start = text.index("\n## Debounced jobs\n")
    end = text.find("\n## ", start + 1)
    return re.findall(rf"```{language}\n(.*?)```", text[start:end], flags=re.S)


async def test_the_python_example_prints_what_it_says(client: Client, runs: Runs) -> None:
    [block] = _blocks("python")
    runs.start(await client.worker(concurrency=2))
    module = types.ModuleType("readme_debounce")  # the example's jobs live in a module of their own
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    namespace["client"] = client
    code = compile(block, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        await finish(eval(code, namespace), "the README's example")  # the README's own code
    # The comments: the first print's line, then the handler's line, then the result.
    assert printed.getvalue().splitlines() == ["False True True", "reindexing document 7 at version 3", "3"]


async def test_the_sql_runs(dsn: str) -> None:
    [block] = _blocks("sql")
    statements = [line for line in block.strip().splitlines() if not line.startswith("--")]
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(job_id, coalesced, _)] = conn.execute(statements[0].replace('"..."', f'"{uuid.uuid4()}"').encode()).fetchall()
        [(key, held_by, *_)] = conn.execute(statements[1].encode()).fetchall()
    assert (key, held_by, coalesced) == ("doc:7", job_id, False)
