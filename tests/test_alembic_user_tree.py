"""pgqueue's migrations as a branch of the user's own alembic tree, from the built wheel in a fresh venv.

Each test starts a project the way a user does (``alembic init migrations``), applies the
README's recipe to the generated files, as the README words it (``path_separator`` changed,
``pgqueue:_migrations/versions`` in ``version_locations``,
``revision_environment = true``, ``keep_revisions_in_your_tree`` in ``env.py``), and drives
the real ``alembic`` and ``pgqueue`` commands of that venv. A later pgqueue revision is
simulated by dropping a revision file into the installed package, on top of whatever
revisions pgqueue ships.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
import pytest

# The tables pgqueue installs at head (revision 0003 added the unique keys and the schedules, 0004 the queues,
# 0005 the history and the completed jobs, 0009 the failed attempts, the results, the workers, the
# partitions, the dependencies and the batches; 0010 the workflows' steps and signals).
PGQUEUE_TABLES = ["pgqueue.attempt_failures", "pgqueue.batch_members", "pgqueue.batches", "pgqueue.completed_jobs",
                  "pgqueue.dependent_jobs", "pgqueue.failed_jobs", "pgqueue.job_dependencies", "pgqueue.job_results",
                  "pgqueue.job_stats", "pgqueue.jobs", "pgqueue.partitions", "pgqueue.queues",
                  "pgqueue.schedule_ticks", "pgqueue.schedules",
                  "pgqueue.unique_keys", "pgqueue.workers", "pgqueue.workflow_signals", "pgqueue.workflow_steps"]

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parent.parent

README = REPO_ROOT / "README.md"


def readme_ini_block() -> str:
    """The README's alembic.ini block (section "Alembic"), as a user copies it."""
    text = README.read_text()
    section = text[text.index("\n## Alembic: pgqueue as a branch of your migrations\n"):]
    start = section.index("```ini\n") + len("```ini\n")
    return section[start:section.index("```", start)]


def apply_readme_ini(generated: str, url: str, *, with_pgqueue: bool = True) -> str:
    """alembic.ini as ``alembic init`` wrote it, edited as the README says: the ``path_separator`` line
    changed to the block's settings (the block's own lines, comments dropped), ``sqlalchemy.url`` set."""
    settings = "".join(line + "\n" for line in readme_ini_block().splitlines()
                       if line.strip() and not line.lstrip().startswith("#"))
    assert settings.startswith("path_separator = "), settings
    if not with_pgqueue:
        settings = settings.replace("    pgqueue:_migrations/versions\n", "")
    edited, changed = re.subn(r"(?m)^path_separator = os\n", lambda _: settings, generated)
    assert changed == 1, "alembic init no longer writes `path_separator = os`: check the README's instructions"
    edited, changed = re.subn(r"(?m)^sqlalchemy\.url = .*$", lambda _: f"sqlalchemy.url = {url}", edited)
    assert changed == 1
    return edited


HOOK = "process_revision_directives=keep_revisions_in_your_tree,"


def _run(command: list[str], cwd: Path, *, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PGQUEUE_DSN", "DATABASE_URL", "UV_PROJECT_ENVIRONMENT")}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    if ok:
        assert result.returncode == 0, f"{command} failed in {cwd}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH; this test builds and installs the wheel with uv")
    dist = tmp_path_factory.mktemp("dist")
    _run([uv, "build", "--wheel", "--out-dir", str(dist)], cwd=REPO_ROOT)
    [built] = dist.glob("*.whl")
    return built


@pytest.fixture
def venv(wheel: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh venv with the wheel installed (its own, since a test adds revisions to the package)."""
    uv = shutil.which("uv") or "uv"
    where = tmp_path / "venv"
    _run([uv, "venv", "--quiet", str(where)], cwd=tmp_path)
    _run([uv, "pip", "install", "--quiet", "--python", str(where / "bin" / "python"), str(wheel)], cwd=tmp_path)
    yield where


def _keep_and_append(body: str) -> Callable[[re.Match[str]], str]:
    """A replacement for ``re.sub`` that keeps group 1 and puts ``body`` after it (taken literally)."""
    return lambda match: match[1] + body


class Project:
    """A user's project with its own alembic tree, driven through the venv's commands."""

    def __init__(self, root: Path, venv: Path, dsn: str) -> None:
        self.root, self.venv, self.dsn = root, venv, dsn
        self.versions = root / "migrations" / "versions"

    generated_ini = ""

    def write_ini(self, *, with_pgqueue: bool = True) -> None:
        """The generated alembic.ini edited as the README says."""
        url = _sqlalchemy_url(self.dsn).replace("%", "%%")
        (self.root / "alembic.ini").write_text(apply_readme_ini(self.generated_ini, url, with_pgqueue=with_pgqueue))

    def alembic(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([str(self.venv / "bin" / "alembic"), *args], cwd=self.root, ok=ok)

    def pgqueue(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([str(self.venv / "bin" / "pgqueue"), *args, "--dsn", self.dsn], cwd=self.root, ok=ok)

    def python(self, code: str) -> str:
        return _run([str(self.venv / "bin" / "python"), "-c", code], cwd=self.root).stdout.strip()

    def package_versions(self) -> Path:
        """pgqueue's versions folder inside the installed package."""
        return Path(self.python("from pgqueue.migrate import version_location; print(version_location())"))

    def pgqueue_head(self) -> str:
        return self.python("from pgqueue.migrate import revisions; print(revisions()[-1])")

    def revision(self, message: str, rev_id: str, upgrade: str, downgrade: str) -> Path:
        """``alembic revision`` as a user runs it (no --head), then the body filled in."""
        self.alembic("revision", "-m", message, "--rev-id", rev_id)
        [path] = self.versions.glob(f"{rev_id}_*.py")
        text = path.read_text()
        for which, statement in (("Upgrade", upgrade), ("Downgrade", downgrade)):
            body = f"op.execute({statement!r})"
            text = re.sub(rf'("""{which} schema."""\n(?:    #.*\n)*    )pass', _keep_and_append(body), text)
        assert f"op.execute({upgrade!r})" in text and f"op.execute({downgrade!r})" in text, text
        path.write_text(text)
        return path

    def later_pgqueue_revision(self, rev_id: str, comment: str) -> None:
        """A pgqueue release with one more revision on its branch: it comments on pgqueue.jobs."""
        head = self.pgqueue_head()
        (self.package_versions() / f"{rev_id}.py").write_text(textwrap.dedent(f'''\
            from alembic import op
            revision = {rev_id!r}
            down_revision = {head!r}
            branch_labels = None
            depends_on = None
            def upgrade() -> None:
                op.execute("comment on table pgqueue.jobs is '{comment}'")
            def downgrade() -> None:
                op.execute("comment on table pgqueue.jobs is null")
            '''))

    # ---------------------------------------------------------------- database
    def versions_recorded(self, table: str = "alembic_version") -> list[str]:
        with psycopg.connect(self.dsn) as conn:
            if conn.execute("select to_regclass(%s)", (table,)).fetchone() == (None,):
                return []
            return sorted(r[0] for r in conn.execute(f"select version_num from {table}"))

    def tables(self) -> list[str]:
        with psycopg.connect(self.dsn) as conn:
            return sorted(f"{r[0]}.{r[1]}" for r in conn.execute(
                "select schemaname, tablename from pg_tables where schemaname in ('public', 'pgqueue')"))

    def jobs_comment(self) -> str | None:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute("select obj_description('pgqueue.jobs'::regclass, 'pg_class')").fetchone()
        return None if row is None else row[0]


def _sqlalchemy_url(dsn: str) -> str:
    # host and port as query parameters: the host may be a Unix socket folder (the embedded server).
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    query = urlencode({k: info[k] for k in ("host", "port", "password") if info.get(k)})
    return f"postgresql+psycopg://{quote(str(info.get('user', 'postgres')))}@/{quote(str(info['dbname']))}?{query}"


def _project(venv: Path, dsn: str, root: Path, *, with_pgqueue: bool = True) -> Project:
    root.mkdir()
    project = Project(root, venv, dsn)
    project.alembic("init", "migrations")
    project.generated_ini = (root / "alembic.ini").read_text()
    project.write_ini(with_pgqueue=with_pgqueue)
    env_py = root / "migrations" / "env.py"
    text = env_py.read_text()
    assert text.count("context.configure(") == 2, text
    text = text.replace("from alembic import context\n",
                        "from alembic import context\n\nfrom pgqueue.migrate import keep_revisions_in_your_tree\n")
    text = text.replace("context.configure(", "context.configure(\n        " + HOOK)
    env_py.write_text(text)
    return project


def test_a_new_tree_gets_its_revisions_and_pgqueue_upgrades_in_either_direction(
        venv: Path, empty_dsn: str, tmp_path: Path) -> None:
    p = _project(venv, empty_dsn, tmp_path / "shop")
    shipped = sorted(x.name for x in p.package_versions().iterdir())
    pgqueue_head = p.pgqueue_head()

    # The user's first revision lands in the user's tree, as a base of its own.
    first = p.revision("create orders", "app_0001", "create table orders (id bigint primary key)",
                       "drop table orders")
    assert first.parent == p.versions
    assert "down_revision: Union[str, Sequence[str], None] = None" in first.read_text()
    second = p.revision("add note", "app_0002", "alter table orders add column note text",
                        "alter table orders drop column note")
    assert second.parent == p.versions and "= 'app_0001'" in second.read_text()
    assert sorted(x.name for x in p.package_versions().iterdir()) == shipped  # nothing written into the package

    p.alembic("upgrade", "heads")
    assert p.tables() == [*PGQUEUE_TABLES, "public.alembic_version", "public.orders"]
    assert p.versions_recorded() == sorted(["app_0002", pgqueue_head])

    # `pgqueue migrate` sees that the user's tree owns pgqueue's branch: nothing to install twice.
    p.pgqueue("migrate")
    assert p.versions_recorded() == sorted(["app_0002", pgqueue_head])
    assert p.versions_recorded("pgqueue_alembic_version") == []

    # A pgqueue release adds a revision: `alembic upgrade heads` applies it in the user's tree...
    p.later_pgqueue_revision("pgqueue_9001_test", "from the tree")
    p.alembic("upgrade", "heads")
    assert p.jobs_comment() == "from the tree"
    assert p.versions_recorded() == ["app_0002", "pgqueue_9001_test"]
    # ...and so does `pgqueue migrate`, recording it where the branch lives.
    p.later_pgqueue_revision("pgqueue_9002_test", "from pgqueue migrate")
    p.pgqueue("migrate")
    assert p.jobs_comment() == "from pgqueue migrate"
    assert p.versions_recorded() == ["app_0002", "pgqueue_9002_test"]
    assert p.versions_recorded("pgqueue_alembic_version") == []
    # `pgqueue migrate --downgrade` refuses a branch it does not own, and says what to run.
    refused = p.pgqueue("migrate", "--downgrade", "base", ok=False)
    assert refused.returncode != 0 and "alembic downgrade pgqueue@base" in refused.stderr

    # Downgrading the user's branch leaves pgqueue's intact.
    p.alembic("downgrade", "app_0001@base")
    assert p.tables() == [*PGQUEUE_TABLES, "public.alembic_version"]
    assert p.versions_recorded() == ["pgqueue_9002_test"]
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select to_regprocedure('pgqueue.reserve(text[], integer, double precision)')"
                            " is not null").fetchone() == (True,)


def test_a_tree_with_history_takes_pgqueue_as_a_second_branch(venv: Path, empty_dsn: str, tmp_path: Path) -> None:
    p = _project(venv, empty_dsn, tmp_path / "legacy", with_pgqueue=False)
    p.revision("create orders", "app_0001", "create table orders (id bigint primary key)", "drop table orders")
    p.alembic("upgrade", "heads")
    assert p.versions_recorded() == ["app_0001"]

    # pgqueue joins the existing tree.
    p.write_ini()
    heads = p.alembic("heads").stdout
    assert "app_0001" in heads and p.pgqueue_head() in heads
    # No "Multiple heads are present": the new revision goes onto the user's head, in the user's tree.
    nxt = p.revision("add note", "app_0002", "alter table orders add column note text",
                     "alter table orders drop column note")
    assert nxt.parent == p.versions and "= 'app_0001'" in nxt.read_text()
    p.alembic("upgrade", "heads")
    assert p.versions_recorded() == sorted(["app_0002", p.pgqueue_head()])
    assert "pgqueue.jobs" in p.tables()
    p.pgqueue("migrate")  # recognised, not `relation "jobs" already exists`
    assert p.versions_recorded("pgqueue_alembic_version") == []

    p.alembic("downgrade", "app_0001@base")
    assert p.versions_recorded() == [p.pgqueue_head()]
    assert p.tables() == [*PGQUEUE_TABLES, "public.alembic_version"]


def test_without_the_hook_the_old_trap_is_what_alembic_does(venv: Path, empty_dsn: str, tmp_path: Path) -> None:
    # The reason for keep_revisions_in_your_tree: with pgqueue's versions listed and no hook, alembic
    # chains a new tree's first revision onto pgqueue's branch, inside the installed package.
    p = _project(venv, empty_dsn, tmp_path / "trap")
    env_py = p.root / "migrations" / "env.py"
    env_py.write_text(env_py.read_text().replace(HOOK, ""))
    shipped = {x.name for x in p.package_versions().iterdir()}
    p.alembic("revision", "-m", "create orders", "--rev-id", "app_0001")
    assert not list(p.versions.glob("app_0001_*.py"))
    assert {x.name for x in p.package_versions().iterdir()} - shipped == {"app_0001_create_orders.py"}



def test_the_readme_edit_is_needed_a_second_path_separator_is_refused(
        venv: Path, empty_dsn: str, tmp_path: Path) -> None:
    # The README's earlier instructions added path_separator to the [alembic] section that
    # `alembic init` (1.16 and later) already writes: a repeated key, which configparser refuses.
    p = _project(venv, empty_dsn, tmp_path / "twice")
    doubled = p.generated_ini.replace("[alembic]\n", "[alembic]\npath_separator = newline\n", 1)
    (p.root / "alembic.ini").write_text(doubled)
    refused = p.alembic("heads", ok=False)
    assert refused.returncode != 0 and "DuplicateOptionError" in refused.stderr, refused.stderr
    p.write_ini()  # as the README says now: the existing line changed
    assert p.pgqueue_head() in p.alembic("heads").stdout


def test_downgrade_minus_one_takes_pgqueue_down_and_the_readme_form_takes_yours(
        venv: Path, empty_dsn: str, tmp_path: Path) -> None:
    p = _project(venv, empty_dsn, tmp_path / "shop")
    p.revision("create orders", "app_0001", "create table orders (id bigint primary key)", "drop table orders")
    p.revision("add note", "app_0002", "alter table orders add column note text",
               "alter table orders drop column note")
    p.alembic("upgrade", "heads")
    head = p.pgqueue_head()
    previous = p.python("from pgqueue.migrate import revisions; print(revisions()[-2])")
    # The trap the README warns about: with two heads, -1 is ambiguous and alembic (only warning)
    # downgrades pgqueue's branch.
    trap = p.alembic("downgrade", "-1")
    assert "ambiguous" in trap.stderr
    assert p.versions_recorded() == sorted(["app_0002", previous])
    p.alembic("upgrade", "heads")
    # The safe forms the README gives: relative to your own head, or the revision to go back to.
    readme = README.read_text()
    assert "alembic downgrade <your head>-1" in readme and "alembic downgrade <the revision to go back to>" in readme
    p.alembic("downgrade", "app_0002-1")
    assert p.versions_recorded() == sorted(["app_0001", head])
    p.alembic("upgrade", "heads")
    p.alembic("downgrade", "app_0001")
    assert p.versions_recorded() == sorted(["app_0001", head])


ORDERS_METADATA = """\
from sqlalchemy import BigInteger, Column, MetaData, Table, Text

from pgqueue.migrate import include_object

target_metadata = MetaData()
Table("orders", target_metadata, Column("id", BigInteger, primary_key=True), Column("note", Text))
"""


def test_autogenerate_with_include_schemas_leaves_pgqueue_alone_with_include_object(
        venv: Path, empty_dsn: str, tmp_path: Path) -> None:
    # pgqueue installed by `pgqueue migrate` (its version table in public) beside the user's own tree.
    p = _project(venv, empty_dsn, tmp_path / "auto", with_pgqueue=False)
    p.pgqueue("migrate")
    p.revision("create orders", "app_0001", "create table orders (id bigint primary key, note text)",
               "drop table orders")
    p.alembic("upgrade", "heads")
    env_py = p.root / "migrations" / "env.py"
    text = env_py.read_text()
    assert text.count("target_metadata = None\n") == 1, text
    text = text.replace("target_metadata = None\n", ORDERS_METADATA)

    def autogenerate(rev_id: str, configure: str) -> str:
        env_py.write_text(text.replace("context.configure(\n", "context.configure(\n        " + configure))
        p.alembic("revision", "--autogenerate", "-m", "sync", "--rev-id", rev_id)
        [path] = p.versions.glob(f"{rev_id}_*.py")
        generated = path.read_text()
        path.unlink()
        return generated

    unfiltered = autogenerate("app_0002", "include_schemas=True,")
    assert "op.drop_table('jobs', schema='pgqueue')" in unfiltered  # the trap
    assert "op.drop_table('pgqueue_alembic_version')" in unfiltered
    # The README's env.py lines.
    readme = README.read_text()
    assert "include_schemas=True,\n    include_object=include_object," in readme
    filtered = autogenerate("app_0002", "include_schemas=True,\n        include_object=include_object,")
    assert "drop_" not in filtered and "pgqueue" not in filtered.split("def upgrade")[1], filtered
