"""Running a README section's examples in tests: the section's code blocks, and its Python example
run as a module of its own (top-level await allowed) with what it prints captured."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import sys
import types
from pathlib import Path
from typing import Any

from pgqueue import Client
from tests.worker_support import finish

README = Path(__file__).resolve().parent.parent / "README.md"


def section_text(title: str, level: int = 2) -> str:
    """The README section headed ``## <title>`` (``level`` 3: ``### <title>``), up to the next heading
    of that level or above."""
    text = README.read_text()
    start = text.index(f"\n{'#' * level} {title}\n")
    ends = [found for found in (text.find(f"\n{'#' * above} ", start + 1) for above in range(2, level + 1))
            if found != -1]
    return text[start:min(ends, default=len(text))]


def section_blocks(title: str, language: str, level: int = 2) -> list[str]:
    """The ``language`` code blocks of the README section headed ``## <title>`` (see :func:`section_text`)."""
    return re.findall(rf"```{language}\n(.*?)```", section_text(title, level), flags=re.S)


def section_commands(title: str, level: int = 2) -> list[list[str]]:
    """The ``pgqueue ...`` command lines of a section's indented blocks, each as its arguments (after
    ``pgqueue``, without the trailing comment)."""
    return [shlex.split(line.strip(), comments=True)[1:] for line in section_text(title, level).splitlines()
            if line.startswith("    pgqueue ")]


def sql_statements(block: str) -> list[str]:
    """The statements of a README SQL block (its ``--`` comments left out), each without its semicolon."""
    kept = []
    for line in block.splitlines():
        at = line.find("--")
        while at != -1 and line[:at].count("'") % 2:  # a -- inside a string literal is no comment
            at = line.find("--", at + 2)
        kept.append(line if at == -1 else line[:at])
    return [statement.strip() for statement in "\n".join(kept).split(";") if statement.strip()]


async def run_example(block: str, module_name: str, client: Client) -> tuple[dict[str, Any], list[str]]:
    """Run ``block`` (the README's own code) in a new module ``module_name`` (so its jobs have a module
    of their own) with ``client`` defined; returns its namespace and the lines it printed."""
    module = types.ModuleType(module_name)
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    namespace["client"] = client
    code = compile(block, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        await finish(eval(code, namespace), "the README's example")
    return namespace, printed.getvalue().splitlines()
