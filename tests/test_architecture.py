"""The shape of the code, checked: no import cycle in pgqueue/, one door to the SQL, a CLI on the public API.

The import checks read the source with ``ast`` (nothing is imported or run), so a cycle kept alive by an
import inside a function counts as much as one at module level. The cycle check counts imports under
``if TYPE_CHECKING:`` too: they never run, but a circle of types is still a circle of rooms (issue 25);
the checks of what a module may reach at run time leave them out.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from pgqueue import load_settings, prepare_database, store

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "pgqueue"
CLI = ROOT / "cli" / "pgqueue_cli"

# What the CLI (and any other client: the dashboard, user code) may import from pgqueue.
PUBLIC_MODULES = {"pgqueue", "pgqueue.migrate", "pgqueue.embedded", "pgqueue.errors", "pgqueue.limits",
                  "pgqueue.dashboard", "pgqueue.metrics", "pgqueue.redaction", "pgqueue.tracing", "pgqueue.sql"}
BENCHMARKS = ROOT / "benchmarks"
DASHBOARD = LIBRARY / "dashboard"
STORE = LIBRARY / "store"
# What the dashboard's web layer may import from pgqueue besides the public API: the typed store.
DASHBOARD_ALLOWED = PUBLIC_MODULES | {"pgqueue.store"}
# What a SQL statement looks like in a Python string (the dashboard test looks for them).
SQL_TEXT = re.compile(r"\bselect\s+[\w*,\s.()]+?\s+from\s+[\w.]+|\binsert\s+into\s+[\w.]+|"
                      r"\bupdate\s+[\w.]+\s+set\b|\bdelete\s+from\s+[\w.]+", re.I)


def module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def imported_modules(path: Path, known: set[str], *, type_checking: bool = False) -> Iterator[str]:
    """Every pgqueue module ``path`` imports at run time (module level or inside functions), and with
    ``type_checking`` those it imports under ``if TYPE_CHECKING:`` too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not type_checking and _type_checking_block(node):
            for inner in ast.walk(node):
                skipped.add(id(inner))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pgqueue":
                    yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "pgqueue":
                continue
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                yield candidate if candidate in known else node.module


def library_graph(*, type_checking: bool = True) -> dict[str, set[str]]:
    """pgqueue's import graph (module -> the pgqueue modules it imports), ``TYPE_CHECKING`` imports
    included unless ``type_checking`` is False."""
    files = {module_name(p, LIBRARY, "pgqueue"): p for p in LIBRARY.rglob("*.py")}
    known = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for target in imported_modules(path, known, type_checking=type_checking):
            # `from pgqueue import x` where x is a name re-exported by the package __init__.
            targets.add(target if target in known else "pgqueue")
        # A package's __init__ importing its own submodules is how a package is built, not a cycle.
        graph[name] = {t for t in targets if t != name and not (name == "pgqueue" or t.startswith(name + "."))}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_library_has_no_import_cycle() -> None:
    # TYPE_CHECKING imports included (library_graph's default).
    # The package __init__ re-exports the public API, so every module reachable from it is
    # left out as an *importer of* "pgqueue"; a module importing the package itself would cycle.
    graph = library_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_import_graph_counts_type_checking_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nimport pgqueue.jobs\n"
                      "if TYPE_CHECKING:\n    from pgqueue.worker.worker import Worker\n", encoding="utf-8")
    known = {"pgqueue.jobs", "pgqueue.worker.worker"}
    assert set(imported_modules(module, known)) == {"pgqueue.jobs"}
    assert set(imported_modules(module, known, type_checking=True)) == {"pgqueue.jobs", "pgqueue.worker.worker"}


def test_no_room_of_the_worker_imports_the_worker() -> None:
    # worker.py wires the rooms (fetcher, executor, completer, heartbeat, ...); they report to it
    # through pgqueue.worker.outcomes, never by importing it, not even for a type. (The package's
    # __init__ re-exporting Worker is how a package is built: not counted.)
    graph = library_graph()
    importers = sorted(name for name, targets in graph.items() if "pgqueue.worker.worker" in targets)
    assert importers == [], f"modules importing pgqueue.worker.worker: {importers}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_store_runs_named_statements() -> None:
    offenders = []
    for path in [*LIBRARY.rglob("*.py"), *CLI.rglob("*.py")]:
        # pgqueue/sql.py hands the text to tools outside the library (the benchmarks), and runs nothing.
        if path.is_relative_to(STORE) or path in (LIBRARY / "resources.py", LIBRARY / "sql.py"):
            continue
        if "pgqueue.sql" in set(imported_modules(path, {"pgqueue.sql"})):
            offenders.append(f"{path.relative_to(ROOT)} imports pgqueue.sql (a door for tools, not the library)")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "pgqueue.resources" \
                    and any(alias.name == "query" for alias in node.names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"modules outside pgqueue/store/ import query(): {offenders}"


def test_the_cli_imports_only_the_public_api() -> None:
    offenders = []
    for path in CLI.rglob("*.py"):
        for target in imported_modules(path, PUBLIC_MODULES):
            if target not in PUBLIC_MODULES:
                offenders.append(f"{path.relative_to(ROOT)}: {target}")
    assert not offenders, f"the CLI imports private pgqueue modules: {offenders}"


def test_imports_inside_functions_stay_visible_to_the_linter() -> None:
    # An import inside a function is how a cycle hides; ruff's PLC0415 reports it in the
    # library and the CLI, where a deliberate one carries a noqa comment for that rule and its reason.
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    assert "PLC0415" not in lint.get("ignore", [])
    for pattern, rules in lint.get("per-file-ignores", {}).items():
        if "PLC0415" in rules:
            assert pattern.split("/")[0] in ("tests", "benchmarks"), pattern


def test_the_worker_does_not_need_the_client() -> None:
    # Not even for type checking: a worker is given its connection's settings, store and DSN.
    offenders = []
    for path in (LIBRARY / "worker").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("pgqueue.client", "pgqueue"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"the worker imports the client: {offenders}"


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_settings_resolve_without_side_effects() -> None:
    # Reading settings must not be able to start the embedded server or run migrations:
    # that is pgqueue.startup's explicit step, used by Client.open and the CLI.
    runs = reachable(library_graph(type_checking=False), "pgqueue.config")
    assert not {"pgqueue.embedded", "pgqueue.migrate", "pgqueue.startup"} & runs


def test_prepare_database_returns_a_configured_dsn_as_it_is(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "pyproject.toml", dsn="postgresql://nowhere.invalid/app", environ={})
    assert prepare_database(settings) == "postgresql://nowhere.invalid/app"


def test_the_dashboard_reads_and_acts_through_the_public_api_and_the_store() -> None:
    # Issue 16: "no SQL in the web layer". The dashboard imports the public API, the store and
    # its own modules; it never opens a connection (psycopg only to parse a DSN for display)
    # and holds no SQL text.
    offenders = []
    for path in DASHBOARD.rglob("*.py"):
        for target in imported_modules(path, set()):
            if target not in DASHBOARD_ALLOWED and not target.startswith("pgqueue.dashboard"):
                offenders.append(f"{path.relative_to(ROOT)} imports {target}")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    if name.split(".")[0] == "psycopg" and name != "psycopg.conninfo":
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_TEXT.search(node.value):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} holds SQL: {node.value[:60]!r}")
    assert not offenders, offenders


def test_the_sql_check_of_the_dashboard_test_recognises_sql() -> None:
    for text in ("SELECT id FROM pgqueue.jobs", "select count(*) from t", "delete from pgqueue.failed_jobs",
                 "insert into pgqueue.jobs (id)", "update pgqueue.jobs set token = null"):
        assert SQL_TEXT.search(text), text
    for text in ("Select at least one failure first.", "retried 3 of 4 selected",
                 "delete the records, whatever the other filters; set a user"):
        assert not SQL_TEXT.search(text), text


def test_only_the_dashboard_and_the_cli_command_import_the_dashboard() -> None:
    # pgqueue must import without the [dashboard] extra (starlette, uvicorn, jinja2).
    offenders = []
    for path in [*LIBRARY.rglob("*.py"), *CLI.rglob("*.py")]:
        if path.is_relative_to(DASHBOARD) or path == CLI / "dashboard.py":
            continue
        for target in imported_modules(path, set()):
            if target.startswith("pgqueue.dashboard"):
                offenders.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not offenders, offenders


def test_importing_the_browser_tests_leaves_no_folder_behind(tmp_path: Path) -> None:
    # It used to make an empty /tmp/pgqueue-screenshots-* at import, on every pytest run.
    import os
    import subprocess
    import sys

    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("PGQUEUE_SCREENSHOTS", None)
    subprocess.run([sys.executable, "-c", "import tests.test_dashboard_browser"], cwd=ROOT, env=env, check=True,
                   timeout=120)
    assert list(tmp_path.iterdir()) == []


def _function_lines(path: Path, qualname: str) -> int:
    owner, name = qualname.split(".")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == owner:
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
                    return (item.end_lineno or item.lineno) - item.lineno + 1
    raise AssertionError(f"{qualname} not found in {path}")


def test_the_worker_module_is_lifecycle_only() -> None:
    # Issue 25: options live in worker/options.py, outcomes in worker/outcomes.py, the background
    # services' start and stop in worker/services.py; worker.py wires them and runs the lifecycle.
    worker = LIBRARY / "worker" / "worker.py"
    assert len(worker.read_text(encoding="utf-8").splitlines()) <= 320
    assert _function_lines(worker, "Worker.__init__") <= 60
    assert _function_lines(LIBRARY / "worker" / "executor.py", "Executor._attempt") <= 60


# The store by domain (issue 25): its modules, what each is for, and the names callers import from
# the package. A module over the bar is a sign that a domain needs splitting again.
STORE_MODULES = {"__init__", "pooled", "errors", "sessions", "dispatch", "schedules", "reservation", "failed",
                 "control", "maintenance", "history", "dashboard", "migrations", "testing", "workers", "results",
                 "dependencies", "workflows"}
STORE_MODULE_LINES = 400
STORE_NAMES = {"Store", "Reservation", "AckBatch", "UniqueDispatch", "UNIQUE_ATTEMPTS", "ScheduleState",
               "ScheduleRow", "QueueStats", "QueueControl", "CancelOutcome", "TableStatistics", "JobStatsRow",
               "Throughput", "ThroughputBucket", "QueueCounts", "ScannedPage", "Listener", "record_failure_on",
               "queue_stats_on", "queue_paused_on", "partition_depths_on", "PartitionDepth", "try_vacuum_lock",
               "vacuum_jobs", "vacuum_unlock",
               "begin_transaction", "begin_transaction_sync", "ack_in_transaction", "ack_in_transaction_sync", "listen",
               "listen_cancel", "alembic_own_versions", "alembic_own_versions_drop", "alembic_user_versions",
               "alembic_user_versions_delete", "alembic_user_versions_insert", "pgqueue_schema_exists",
               "DispatchedJob", "dispatched_jobs_on_sync", "FailureSearch", "JobSearch", "RegisteredWorker",
               "WorkerIdentity", "DebouncedDispatch", "PartitionStatus", "Wait", "BatchLink", "Link",
               "BatchState", "WorkflowStep", "WorkflowCounts", "WORKFLOW_COUNT_CAP",
               "WORKFLOW_STATES"}


def test_the_store_is_a_package_of_small_domain_modules() -> None:
    assert not (LIBRARY / "store.py").exists() and not (LIBRARY / "storage.py").exists()
    modules = {p.stem: p for p in STORE.glob("*.py")}
    assert set(modules) == STORE_MODULES, "a store module was added or removed: name it in STORE_MODULES " \
                                          "and in README's Code layout"
    long = {name: n for name, p in modules.items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > STORE_MODULE_LINES}
    assert not long, f"store modules over {STORE_MODULE_LINES} lines: {long}"
    assert not list(STORE.glob("*/")), "the store has no subpackages"


def test_the_store_package_exports_what_callers_import() -> None:

    assert set(store.__all__) == STORE_NAMES
    assert all(hasattr(store, name) for name in STORE_NAMES)
    # Store is composed of one class per domain, each defined in its own module.
    domains = {base.__module__ for base in store.Store.__mro__[1:] if base.__module__.startswith("pgqueue.store.")}
    assert domains == {f"pgqueue.store.{m}" for m in ("dispatch", "schedules", "reservation", "failed", "control",
                                                       "maintenance", "history", "dashboard", "testing",
                                                       "workers", "results", "dependencies", "workflows",
                                                       "pooled")}


def test_every_store_module_is_described_in_the_readme() -> None:
    layout = (ROOT / "README.md").read_text(encoding="utf-8").split("## Code layout", 1)[1].split("\n## ", 1)[0]
    missing = [m for m in STORE_MODULES - {"__init__"} if f"`{m}.py`" not in layout]
    assert not missing, f"README's Code layout does not say what these store modules hold: {missing}"


def test_the_benchmarks_import_only_the_public_api() -> None:
    offenders = []
    for path in BENCHMARKS.rglob("*.py"):
        for target in imported_modules(path, PUBLIC_MODULES):
            if target not in PUBLIC_MODULES:
                offenders.append(f"{path.relative_to(ROOT)}: {target}")
    assert not offenders, f"the benchmarks import private pgqueue modules: {offenders}"


# Issue 25's bars for the whole library: a module past MODULE_LINES holds more than one thing, a function
# past FUNCTION_LINES more than one step (the dashboard's route functions included: its pages are
# classes of one method per endpoint).
MODULE_LINES = 500
FUNCTION_LINES = 60


def long_functions(path: Path, limit: int) -> list[str]:
    """``path:line name (n lines)`` of every function or method in ``path`` longer than ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{shown}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_module_of_the_library_is_over_the_bar() -> None:
    long = {str(p.relative_to(ROOT)): n for p in LIBRARY.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines: {long}"


def test_no_function_of_the_library_is_over_the_bar() -> None:
    long = [found for p in LIBRARY.rglob("*.py") for found in long_functions(p, FUNCTION_LINES)]
    assert not long, f"functions over {FUNCTION_LINES} lines: {long}"


def test_the_function_check_measures_a_function_from_def_to_its_last_line(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def short():\n    return 1\n\n\nclass C:\n    async def long(self):\n"
                      + "        x = 1\n" * 5 + "        return x\n", encoding="utf-8")
    assert long_functions(module, 7) == []
    assert [line.split(" ", 1)[1] for line in long_functions(module, 6)] == ["long (7 lines)"]


def test_the_split_modules_keep_their_import_paths() -> None:
    # context.py, client.py and jobs.py were split (issue 25); what callers import from them still works.
    import pgqueue
    from pgqueue.client import Client, ScheduleInfo
    from pgqueue.client_operations import ClientOperations
    from pgqueue.context import Decisions, JobContext, SyncJobContext
    from pgqueue.job_context import JobContext as Defined

    assert JobContext is Defined is pgqueue.JobContext and SyncJobContext is pgqueue.SyncJobContext
    assert Decisions is not None and ScheduleInfo is pgqueue.ScheduleInfo
    assert issubclass(Client, ClientOperations) and Client is pgqueue.Client
    assert all(hasattr(Client, name) for name in ("stats", "pause", "cancel", "schedules", "failed", "worker"))


def test_the_modules_split_out_are_described_in_the_readme() -> None:
    layout = (ROOT / "README.md").read_text(encoding="utf-8").split("## Code layout", 1)[1].split("\n## ", 1)[0]
    split = ["client_operations.py", "job_context.py", "failures.py", "args_errors.py", "decisions.py", "debounce.py"]
    assert all((LIBRARY / name).exists() or (LIBRARY / "worker" / name).exists() for name in split)
    missing = [name for name in split if f"`{name}`" not in layout]
    assert not missing, f"README's Code layout does not say what these modules hold: {missing}"
