"""Running a README section's examples in tests: the section's code blocks, and its Python example
run as a module of its own (top-level await allowed) with what it prints captured."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
import types
from pathlib import Path
from typing import Any

from pgqueue import Client
from tests.worker_support import finish

README = Path(__file__).resolve().parent.parent / "README.md"


def section_blocks(title: str, language: str) -> list[str]:
    """The ``language`` code blocks of the README section headed ``## <title>``."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(rf"```{language}\n(.*?)```", text[start:end], flags=re.S)


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
