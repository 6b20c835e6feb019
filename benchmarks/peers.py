"""Where each system's code runs: this venv, or one the harness builds for it.

Most systems run in the benchmark's own environment (the ``bench`` dependency group). Two
cannot:

- **oban** (the Python port of Oban) needs Python >= 3.12, and the project's environment is
  3.11: the harness makes a venv of its own with ``uv venv --python <3.12 interpreter>`` and
  installs ``oban==OBAN_VERSION`` from the package index into it;
- **pgqueue@<rev>** (this session's base revision, a system of its own so that before and
  after are measured in one interleaved run): a detached git worktree of that revision with
  its own venv (``uv sync --frozen --no-default-groups --no-editable``: the library only,
  installed as a wheel would be, so that its ``pgqueue`` is the one imported).

Both run ``python -m benchmarks.worker`` (worker processes) and ``python -m benchmarks.agent``
(producers) from this checkout: ``PYTHONSAFEPATH=1`` keeps the working directory off
``sys.path`` and ``PYTHONPATH`` names a directory that holds only a link to this checkout's
``benchmarks`` package, so the foreign venv's own ``pgqueue`` (or ``oban``) is the one found.
The harness talks to them only through those subprocesses.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("benchmarks")

ROOT = Path(__file__).resolve().parent.parent
OBAN_VERSION = "0.7.0"
DEFAULT_BASE_REV = "db1473d"
# Systems whose code runs in a venv the harness makes (everything else: this interpreter).
FOREIGN = ("oban", "pgqueue_base")


@dataclass
class Interpreter:
    """How to start a Python process that runs one system's code."""

    python: str
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = ROOT

    def environment(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}


@dataclass
class Peers:
    """The venvs and worktrees the harness made (``prepare``), by system."""

    directory: Path
    base_rev: str = DEFAULT_BASE_REV
    oban_python: str | None = None
    interpreters: dict[str, Interpreter] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    base_commit: str = ""

    def interpreter(self, system: str) -> Interpreter:
        """The interpreter of ``system`` (this one for the systems installed in the bench group)."""
        if system in FOREIGN:
            if system not in self.interpreters:
                raise RuntimeError(f"{system} was not prepared: {self.problems.get(system, 'prepare() not run')}")
            return self.interpreters[system]
        return Interpreter(sys.executable)

    def available(self, system: str) -> bool:
        return system not in FOREIGN or system in self.interpreters

    def prepare(self, systems: list[str]) -> None:
        """Build (or reuse) the venvs and worktrees the foreign systems among ``systems`` need."""
        self.directory.mkdir(parents=True, exist_ok=True)
        shim = self.directory / "shim"
        shim.mkdir(exist_ok=True)
        link = shim / "benchmarks"
        if link.is_symlink() and link.resolve() != (ROOT / "benchmarks"):
            link.unlink()
        if not link.exists():
            link.symlink_to(ROOT / "benchmarks", target_is_directory=True)
        foreign_env = {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(shim)}
        if "oban" in systems:
            try:
                python = self._oban_venv()
                self.interpreters["oban"] = Interpreter(python, foreign_env, shim)
            except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
                self.problems["oban"] = str(exc)
                log.warning("oban left out: %s", exc)
        if "pgqueue_base" in systems:
            try:
                python = self._base_venv()
                self.interpreters["pgqueue_base"] = Interpreter(python, foreign_env, shim)
            except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
                self.problems["pgqueue_base"] = str(exc)
                log.warning("pgqueue@%s left out: %s", self.base_rev, exc)

    # ------------------------------------------------------------------ oban
    def _find_python312(self) -> str:
        if self.oban_python:
            return self.oban_python
        candidates = [shutil.which(name) for name in ("python3.13", "python3.12")]
        candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))
        for found in candidates:
            if found and _python_at_least(found, (3, 12)):
                return found
        raise RuntimeError("oban needs Python >= 3.12 and none was found (give one with --oban-python)")

    def _oban_venv(self) -> str:
        venv = self.directory / f"oban-{OBAN_VERSION}"
        python = venv / "bin" / "python"
        if python.exists() and _has(str(python), "oban", OBAN_VERSION):
            return str(python)
        uv = _uv()
        base = self._find_python312()
        log.info("making oban's venv in %s (Python %s)", venv, base)
        subprocess.run([uv, "venv", "--quiet", "--clear", "--python", base, str(venv)], check=True)
        subprocess.run([uv, "pip", "install", "--quiet", "--python", str(python), f"oban=={OBAN_VERSION}"],
                       check=True)
        return str(python)

    # ----------------------------------------------------------- pgqueue@rev
    def _base_venv(self) -> str:
        commit = subprocess.run(["git", "rev-parse", "--verify", f"{self.base_rev}^{{commit}}"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
        self.base_commit = commit
        tree = self.directory / f"pgqueue-{commit[:12]}"
        venv = self.directory / f"pgqueue-{commit[:12]}-venv"
        python = venv / "bin" / "python"
        if not (tree / "pyproject.toml").exists():
            log.info("making a worktree of %s in %s", commit[:12], tree)
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                           capture_output=True)
        if not python.exists():
            log.info("making pgqueue@%s's venv in %s", commit[:12], venv)
            env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
            subprocess.run([_uv(), "sync", "--quiet", "--frozen", "--no-default-groups", "--no-editable",
                            "--python", sys.executable, "--project", str(tree)], check=True, env=env)
        return str(python)


def default_directory() -> Path:
    """Where the venvs and the worktree are kept between runs: outside the checkout, since the shim's
    link back to ``benchmarks/`` would make tools that walk the tree (ruff, mypy, pytest) loop."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pgqueue-bench"


PEERS: Peers | None = None  # set by the runner once the foreign systems are prepared


def interpreter_for(system: str) -> Interpreter:
    """The interpreter that runs ``system``'s code (this one unless the runner prepared another)."""
    if system in FOREIGN:
        if PEERS is None:
            raise RuntimeError(f"{system} runs in a venv of its own: the runner prepares it (peers.PEERS)")
        return PEERS.interpreter(system)
    return Interpreter(sys.executable)


def _uv() -> str:
    found = shutil.which("uv") or os.path.expanduser("~/.local/bin/uv")
    if not os.path.exists(found):
        raise RuntimeError("uv is needed to make the peers' venvs and was not found on PATH or in ~/.local/bin")
    return found


def _python_at_least(python: str, version: tuple[int, int]) -> bool:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, check=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return False
    return (int(out[0]), int(out[1])) >= version


def _has(python: str, package: str, version: str) -> bool:
    try:
        out = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return out == version
