"""The README's CLI reference is the real help text, and every ``pgqueue`` command it shows exists.

Regenerate the reference after changing a command::

    uv run python -m tests.test_cli_readme
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer._click.core import Context
from typer.core import TyperGroup
from typer.main import get_command

from pgqueue_cli.app import app
from tests.cli_support import enqueue, record_failure

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- cli-reference:start -->", "<!-- cli-reference:end -->"
WIDTH = 88


def _commands() -> list[tuple[list[str], str]]:
    """(command path, help text) for the root, every command and every subcommand."""
    root = get_command(app)
    top = Context(root, info_name="pgqueue", terminal_width=WIDTH, max_content_width=WIDTH,
                  help_option_names=["-h", "--help"])
    found: list[tuple[list[str], str]] = [([], root.get_help(top))]
    assert isinstance(root, TyperGroup)
    for name in root.list_commands(top):
        command = root.get_command(top, name)
        assert command is not None
        ctx = Context(command, info_name=name, parent=top)
        found.append(([name], command.get_help(ctx)))
        if isinstance(command, TyperGroup):
            for sub_name in command.list_commands(ctx):
                sub = command.get_command(ctx, sub_name)
                assert sub is not None
                found.append(([name, sub_name], sub.get_help(Context(sub, info_name=sub_name, parent=ctx))))
    return found


def reference() -> str:
    """The CLI reference section as it must appear in the README."""
    parts = [START]
    for path, text in _commands():
        title = " ".join(["pgqueue", *path])
        parts.append(f"#### `{title}`\n\n```text\n{text.rstrip()}\n```")
    parts.append(END)
    return "\n\n".join(parts)


def _section(text: str) -> str:
    start, end = text.index(START), text.index(END) + len(END)
    return text[start:end]


def test_readme_cli_reference_is_the_generated_help() -> None:
    assert _section(README.read_text()) == reference(), \
        "README's CLI reference is stale: run `uv run python -m tests.test_cli_readme`"


def test_every_pgqueue_command_in_the_readme_exists() -> None:
    known = {" ".join(path) for path, _ in _commands() if path}
    text = README.read_text()
    mentioned = set(re.findall(r"pgqueue ((?:queue:[a-z-]+)|migrate|demo|embedded [a-z]+)", text))
    assert mentioned, "the README names no pgqueue command"
    assert mentioned <= known, f"unknown commands in the README: {sorted(mentioned - known)}"
    assert {"migrate", "queue:work", "demo", "embedded stop"} <= mentioned


def _sql_blocks(heading: str) -> list[str]:
    text = README.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```sql\n(.*?)```", text[start:end], flags=re.S)


def test_sql_recipes_run(conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "mail")
    enqueue(conn, "mail", delay=60)
    failure_id, _ = record_failure(conn, "mail", args={"order_id": 42})
    blocks = _sql_blocks("SQL recipes for operators")
    assert len(blocks) >= 2
    for block in blocks:
        conn.execute(block.replace("<failure id>", failure_id).encode())
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)  # the last recipe clears 'mail'


def test_access_recipe_runs(conn: psycopg.Connection[Any]) -> None:
    [block] = _sql_blocks("Sensitive data in failed_jobs")
    suffix = uuid.uuid4().hex[:8]
    monitor, operator = f"queue_monitor_{suffix}", f"queue_operator_{suffix}"
    conn.execute(f"create role {monitor}; create role {operator}".encode())
    try:
        conn.execute(block.replace("queue_monitor", monitor).replace("queue_operator", operator).encode())
        failure_id, _ = record_failure(conn, "mail", args={"card": "4111"})
        conn.execute(f"set role {monitor}".encode())
        assert conn.execute("select reason from pgqueue.failed_jobs").fetchall() == [("exception",)]
        assert conn.execute("select failed from pgqueue.queue_stats").fetchall() == [(1,)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select envelope from pgqueue.failed_jobs")
        conn.execute(f"reset role; set role {operator}".encode())
        conn.execute("select pgqueue.retry_failed(%s)", (failure_id,))
        assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (1,)
    finally:
        conn.execute(b"reset role")
        for role in (monitor, operator):
            conn.execute(f"drop owned by {role}; drop role {role}".encode())


if __name__ == "__main__":
    content = README.read_text()
    README.write_text(content.replace(_section(content), reference()))
    print(f"updated the CLI reference in {README}")
