"""Configuration ([tool.pgqueue], environment, arguments) and the error hierarchy (issue 3)."""

from __future__ import annotations

import math
from pathlib import Path

import psycopg
import pytest

import pgqueue
from pgqueue import (
    Backoff,
    Client,
    Job,
    JobContext,
    QueueConfigurationError,
    QueueDispatchError,
    QueueError,
    QueueLeaseError,
    QueuePayloadError,
    QueueResultError,
    QueueRetryError,
    QueueStorageError,
    load_settings,
)
from tests.api_support import client, settings_for

__all__ = ["client"]


class ConfigJob(Job):
    name = "tests.config_job"

    n: int = 0

    async def handle(self, context: JobContext) -> None:
        return None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(text, encoding="utf-8")
    return path


FULL = """
[project]
name = "app"

[tool.pgqueue]
default = "database"
app = "myapp.jobs"

[tool.pgqueue.connections.database]
dsn = "postgresql://file-host/app"
listen_dsn = "postgresql://file-host-direct/app"
queue = "mail"
lease = 120
lease_margin = 10
timeout = 30
tries = 5
backoff = [1, 5]
max_payload_bytes = 2048
prepared_statements = false

[tool.pgqueue.connections.reports]
dsn = "postgresql://reports-host/reports"
queue = "reports"
backoff = 2.5

[tool.pgqueue.connections.inline]
driver = "sync"
"""


# ------------------------------------------------------------- [tool.pgqueue]

def test_settings_come_from_tool_pgqueue_in_pyproject(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    settings = load_settings(path, environ={})
    assert settings.source == str(path)
    assert settings.app == ("myapp.jobs",)
    db = settings.connection()
    assert db.name == "database" and db.driver == "database"
    assert (db.dsn, db.listen_dsn, db.queue) == ("postgresql://file-host/app", "postgresql://file-host-direct/app",
                                                "mail")
    assert (db.lease, db.lease_margin, db.timeout, db.tries) == (120, 10, 30, 5)
    assert db.backoff == Backoff.fixed(1, 5)
    assert (db.max_payload_bytes, db.prepared_statements) == (2048, False)
    reports = settings.connection("reports")
    assert (reports.dsn, reports.queue, reports.backoff) == ("postgresql://reports-host/reports", "reports",
                                                            Backoff.fixed(2.5))
    assert settings.connection("inline").driver == "sync"
    assert settings.connection("sync").driver == "sync"  # always there


def test_without_configuration_the_defaults_apply_and_no_dsn_is_set(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "[project]\nname = 'x'\n"), environ={})
    assert settings.source == "defaults"
    assert settings.database_dsn() is None  # resolve_dsn would start the embedded server
    db = settings.connection("database")
    assert (db.queue, db.lease, db.timeout, db.tries) == ("default", 90.0, 60.0, 3)
    assert db.max_payload_bytes == 1024 * 1024


def test_the_nearest_pyproject_is_found_from_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, FULL)
    nested = tmp_path / "src" / "app"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    assert load_settings(environ={}).connection().queue == "mail"


# --------------------------------------------------------------- precedence

def test_pgqueue_dsn_from_the_environment_overrides_the_file(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, FULL), environ={"PGQUEUE_DSN": "postgresql://env/a"})
    assert settings.connection("database").dsn == "postgresql://env/a"
    assert settings.database_dsn() == "postgresql://env/a"
    # a connection with a database of its own keeps it
    assert settings.connection("reports").dsn == "postgresql://reports-host/reports"


def test_database_url_is_the_fallback_of_pgqueue_dsn(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    assert load_settings(path, environ={"DATABASE_URL": "postgresql://url/b"}).database_dsn() == "postgresql://url/b"
    both = {"DATABASE_URL": "postgresql://url/b", "PGQUEUE_DSN": "postgresql://env/a"}
    assert load_settings(path, environ=both).database_dsn() == "postgresql://env/a"
    assert load_settings(path, environ={"PGQUEUE_DSN": "", "DATABASE_URL": "postgresql://url/b"}).database_dsn() \
        == "postgresql://url/b"


def test_an_explicit_dsn_wins_over_environment_and_file(tmp_path: Path) -> None:
    env = {"DATABASE_URL": "postgresql://url/b", "PGQUEUE_DSN": "postgresql://env/a"}
    settings = load_settings(write(tmp_path, FULL), dsn="postgresql://arg/c", environ=env)
    assert settings.connection("database").dsn == "postgresql://arg/c"
    assert settings.database_dsn() == "postgresql://arg/c"


def test_load_settings_reads_os_environ_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgresql://os-environ/d")
    assert load_settings(write(tmp_path, "")).database_dsn() == "postgresql://os-environ/d"


async def test_a_queue_uses_the_configured_database(dsn: str, tmp_path: Path) -> None:
    path = write(tmp_path, "[tool.pgqueue.connections.database]\nqueue = 'from-file'\n")
    q = Client(settings=load_settings(path, environ={"PGQUEUE_DSN": dsn}))
    try:
        await q.dispatch(ConfigJob())
        assert q.dsn == dsn
        [stats] = await q.stats()
        assert (stats.queue, stats.ready) == ("from-file", 1)
    finally:
        await q.close()


# ---------------------------------------------------------- misconfiguration

def test_an_unknown_connection_name_is_refused_listing_the_known_ones(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, FULL), environ={})
    with pytest.raises(QueueConfigurationError, match="unknown connection 'nope'") as caught:
        settings.connection("nope")
    assert "database, inline, reports, sync" in str(caught.value)


def test_an_unknown_default_connection_fails_when_loading(tmp_path: Path) -> None:
    with pytest.raises(QueueConfigurationError, match="unknown connection 'elsewhere'"):
        load_settings(write(tmp_path, "[tool.pgqueue]\ndefault = 'elsewhere'\n"), environ={})


async def test_dispatch_to_an_unknown_connection_is_refused(client: Client) -> None:
    with pytest.raises(QueueConfigurationError, match="unknown connection 'missing'"):
        await client.dispatch(ConfigJob(), connection="missing")
    with pytest.raises(QueueConfigurationError, match="unknown connection 'missing'"):
        await client.worker("missing")


@pytest.mark.parametrize(("table", "setting"), [
    # Without the lease heartbeat a timeout must fit in the lease (issue 11: with it, it need not).
    ("timeout = 85\nheartbeat = false", "timeout"),               # 85 >= 90 - 5
    ("timeout = 100\nlease = 100\nheartbeat = false", "timeout"),
    ("timeout = 4e7", "timeout"),                                 # over one year
    ("heartbeat = 'yes'", "heartbeat"),
    ("lease = 30\nlease_margin = 30", "lease_margin"),
    ("tries = 0", "tries"),
    ("tries = -2", "tries"),
    ("backoff = []", "backoff"),
    ("backoff = -1", "backoff"),
    ("backoff = nan", "backoff"),
    ("lease = nan", "lease"),
    ("lease = -5", "lease"),
    ("timeout = 0", "timeout"),
    ("queue = ''", "queue"),
    ("max_payload_bytes = 0", "max_payload_bytes"),
    ("driver = 'redis'", "driver"),
    ("colour = 'blue'", "colour"),
])
def test_a_bad_connection_setting_is_named_in_the_error(tmp_path: Path, table: str, setting: str) -> None:
    path = write(tmp_path, f"[tool.pgqueue.connections.database]\n{table}\n")
    with pytest.raises(QueueConfigurationError, match=setting) as caught:
        load_settings(path, environ={})
    assert "'database'" in str(caught.value) or "connections.database" in str(caught.value)


def test_the_timeout_error_says_what_to_do(tmp_path: Path) -> None:
    path = write(tmp_path, "[tool.pgqueue.connections.database]\ntimeout = 85\nheartbeat = false\n")
    with pytest.raises(QueueConfigurationError) as caught:
        load_settings(path, environ={})
    message = str(caught.value)
    assert "lease - lease_margin = 90 - 5 = 85s" in message
    assert "lower the timeout or raise the lease" in message


def test_the_sync_connection_has_no_lease_so_any_timeout_is_fine(tmp_path: Path) -> None:
    path = write(tmp_path, "[tool.pgqueue.connections.sync]\ntimeout = 500\n")
    assert load_settings(path, environ={}).connection("sync").timeout == 500


def test_the_renamed_retry_after_key_is_refused_naming_lease(tmp_path: Path) -> None:
    # 0.x renamed the lease setting; the old key must say what to write, not read as a default.
    path = write(tmp_path, "[tool.pgqueue.connections.database]\nretry_after = 30\n")  # old key
    with pytest.raises(QueueConfigurationError,
                       match=r"setting 'retry_after' was renamed to 'lease'; write lease = 30"):  # old key
        load_settings(path, environ={})


def test_unknown_top_level_settings_and_bad_toml_are_refused(tmp_path: Path) -> None:
    with pytest.raises(QueueConfigurationError, match=r"unknown setting.*dns"):
        load_settings(write(tmp_path, "[tool.pgqueue]\ndns = 'x'\n"), environ={})
    with pytest.raises(QueueConfigurationError, match="not valid TOML"):
        load_settings(write(tmp_path, "[tool.pgqueue\n"), environ={})


@pytest.mark.parametrize("delay", [-1, -0.001, math.nan, math.inf, "5", True])
async def test_a_bad_delay_is_a_configuration_error_naming_the_delay(client: Client, delay: object) -> None:
    with pytest.raises(QueueConfigurationError, match="delay must be a finite number of seconds >= 0") as caught:
        await client.dispatch(ConfigJob(), delay=delay)  # type: ignore[arg-type]
    assert "tests.config_job" in str(caught.value)
    with pytest.raises(QueueConfigurationError, match="delay"):
        await client.dispatch_many([ConfigJob()], delay=delay)  # type: ignore[arg-type]
    with pytest.raises(QueueConfigurationError, match="delay"):
        await client.dispatch_many([ConfigJob(), ConfigJob()], delay=[0, delay])  # type: ignore[list-item]
    assert await client.stats() == []


@pytest.mark.parametrize("tries", [0, -1])
async def test_tries_below_one_on_a_job_is_refused_at_dispatch(client: Client, tries: int) -> None:
    bad = type("NoTries", (ConfigJob,), {"tries": tries, "name": f"tests.no_tries{tries}", "__annotations__": {}})
    with pytest.raises(QueueConfigurationError, match="tries must be an integer >= 1"):
        await bad().dispatch(using=client)


async def test_a_job_timeout_is_checked_against_its_connection(client: Client, dsn: str, tmp_path: Path) -> None:
    slow = type("Slow", (ConfigJob,), {"timeout": 200.0, "name": "tests.slow", "__annotations__": {}})
    # Without the lease heartbeat, the timeout must fit in the lease (issue 11).
    strict_path = write(tmp_path, "[tool.pgqueue.connections.database]\nheartbeat = false\n")
    strict = Client(settings=load_settings(strict_path, dsn=dsn, environ={}))
    try:
        with pytest.raises(QueueConfigurationError, match=r"timeout is 200s .* connection 'database'"):
            await slow().dispatch(using=strict)
    finally:
        await strict.close()
    path = write(tmp_path, "[tool.pgqueue.connections.database]\nlease = 600\n")
    roomy = Client(settings=load_settings(path, dsn=dsn, environ={}))
    try:
        await slow().dispatch(using=roomy)
        assert (await roomy.stats())[0].ready == 1
    finally:
        await roomy.close()


# ----------------------------------------------------------------------- errors

def test_one_error_hierarchy_exported_from_pgqueue() -> None:
    subclasses = [QueueConfigurationError, QueueDispatchError, QueuePayloadError, QueueRetryError,
                  QueueLeaseError, QueueStorageError, QueueResultError, pgqueue.WorkflowError]
    for error in subclasses:
        assert issubclass(error, QueueError)
        assert getattr(pgqueue, error.__name__) is error
        assert error.__name__ in pgqueue.__all__
    assert issubclass(QueueError, Exception)
    assert set(QueueError.__subclasses__()) == set(subclasses)
    # Issue 26: what result() raises is a QueueResultError.
    assert {pgqueue.JobFailedError, pgqueue.JobResultTimeout} == set(QueueResultError.__subclasses__())
    # Issue 27: the workflows' errors are WorkflowErrors, each exported.
    assert {pgqueue.WorkflowDeterminismError, pgqueue.WorkflowStepError, pgqueue.WorkflowTimeout,
            pgqueue.WorkflowChildError} == set(pgqueue.WorkflowError.__subclasses__())


def test_every_public_name_is_exported_and_documented() -> None:
    for name in pgqueue.__all__:
        thing = getattr(pgqueue, name)
        assert (thing.__doc__ or "").strip(), name


async def test_a_database_never_migrated_says_run_pgqueue_migrate(empty_dsn: str) -> None:
    q = Client(settings=settings_for(empty_dsn))
    try:
        with pytest.raises(QueueStorageError, match="pgqueue migrate") as hint:
            await q.check_schema()
        # heads, plural: with pgqueue as a branch of the user's tree, `alembic upgrade head` is refused.
        assert "`alembic upgrade heads` where pgqueue's revisions are a branch" in str(hint.value)
        with pytest.raises(QueueStorageError, match="pgqueue migrate") as caught:
            await q.dispatch(ConfigJob())
        assert "tests.config_job" in str(caught.value)
        with pytest.raises(QueueStorageError, match="pgqueue migrate"):
            await q.dispatch_many([ConfigJob(), ConfigJob()])
        repo = await q.failed()
        with pytest.raises(QueueStorageError, match="pgqueue migrate"):
            await repo.all()
        with pytest.raises(QueueStorageError, match="pgqueue migrate"):
            await q.stats()
    finally:
        await q.close()



# ------------------------------------------------- one DSN, whatever its form

def sqlalchemy_url(dsn: str, driver: str = "psycopg") -> str:
    """The same database as a SQLAlchemy URL (``postgresql+psycopg://…``), as an app's DATABASE_URL has it."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    user = quote(params.pop("user", ""), safe="")
    password = params.pop("password", None)
    dbname = quote(params.pop("dbname", ""), safe="")
    who = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    return f"postgresql+{driver}://{who}/{dbname}?{urlencode(params)}"


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2", "asyncpg"])
def test_sqlalchemy_urls_are_accepted_from_every_source(tmp_path: Path, driver: str) -> None:
    url = f"postgresql+{driver}://app:secret@db.internal:6543/shop"
    expected = "postgresql://app:secret@db.internal:6543/shop"
    empty = write(tmp_path, "")
    assert load_settings(empty, environ={"DATABASE_URL": url}).database_dsn() == expected
    assert load_settings(empty, environ={"PGQUEUE_DSN": url}).database_dsn() == expected
    assert load_settings(empty, dsn=url, environ={}).database_dsn() == expected
    configured = load_settings(write(tmp_path, f'[tool.pgqueue.connections.database]\ndsn = "{url}"\n'
                                               f'listen_dsn = "{url}"\n'), environ={})
    assert (configured.database_dsn(), configured.connection().listen_dsn) == (expected, expected)
    assert pgqueue.ConnectionConfig(name="database", dsn=url).dsn == expected


@pytest.mark.parametrize(("environ", "source"), [
    ({"DATABASE_URL": "not a dsn"}, "invalid DSN in the environment variable DATABASE_URL: "),
    ({"PGQUEUE_DSN": "not a dsn", "DATABASE_URL": "postgresql://fine/db"},
     "invalid DSN in the environment variable PGQUEUE_DSN: "),
    ({"DATABASE_URL": "postgresql+pg9000://h/db"}, "invalid DSN in the environment variable DATABASE_URL: the scheme "
                                                 "'postgresql+pg9000://' is a SQLAlchemy URL for a driver"),
])
def test_a_bad_dsn_names_where_it_came_from(tmp_path: Path, environ: dict[str, str], source: str) -> None:
    with pytest.raises(QueueConfigurationError) as raised:
        load_settings(write(tmp_path, ""), environ=environ)
    assert str(raised.value).startswith(source), raised.value
    assert "--dsn" not in str(raised.value)


def test_a_bad_dsn_in_the_file_or_argument_names_them(tmp_path: Path) -> None:
    path = write(tmp_path, '[tool.pgqueue.connections.reports]\ndsn = "host=db port=x y"\n')
    with pytest.raises(QueueConfigurationError, match=r"invalid DSN in \[tool.pgqueue.connections.reports\] dsn of "):
        load_settings(path, environ={})
    with pytest.raises(QueueConfigurationError, match=r"invalid DSN in the dsn argument \(--dsn\): "):
        load_settings(write(tmp_path, ""), dsn="not a dsn", environ={})


async def test_a_client_works_on_a_sqlalchemy_database_url(dsn: str, tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, ""), environ={"DATABASE_URL": sqlalchemy_url(dsn)})
    async with Client(settings=settings) as q:
        job_id = await q.dispatch(ConfigJob(n=1))
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute("select envelope->>'name' from pgqueue.jobs where id = %s", (job_id,))
        assert await cur.fetchone() == ("tests.config_job",)
