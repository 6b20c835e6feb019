"""Where pgqueue's SQL files and alembic environment live, and how Python reads them by name.

In a source checkout they are the top-level ``sql/`` and ``migrations/`` folders; in an
installed wheel they travel inside the package as ``pgqueue/_sql`` and
``pgqueue/_migrations``. Every SQL statement the library runs is one file under ``sql/``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _locate(packaged: str, source: str) -> Path:
    inside = _PACKAGE_DIR / packaged
    if inside.is_dir():
        return inside
    beside = _PACKAGE_DIR.parent / source
    if beside.is_dir():
        return beside
    raise FileNotFoundError(
        f"pgqueue: cannot find its {source}/ folder (looked in {inside} and {beside}); "
        "the installation is incomplete, reinstall pgqueue"
    )


def sql_dir() -> Path:
    """The folder holding pgqueue's SQL files (functions/, revisions/, head/, queries/, roles/)."""
    return _locate("_sql", "sql")


def migrations_dir() -> Path:
    """The alembic environment folder (env.py, versions/)."""
    return _locate("_migrations", "migrations")


def versions_dir() -> Path:
    """The alembic versions folder; add it to ``version_locations`` to upgrade with your own tree."""
    return migrations_dir() / "versions"


@cache
def sql_file(relative_path: str) -> str:
    """The text of one SQL file, e.g. ``sql_file("functions/reserve/0007.sql")``."""
    return (sql_dir() / relative_path).read_text(encoding="utf-8")


def sql_bytes(relative_path: str) -> bytes:
    """The bytes of one SQL file, as its checksum in ``sql/migrations.lock`` sees them (never cached)."""
    return (sql_dir() / relative_path).read_bytes()


def function_names(root: Path | None = None) -> list[str]:
    """The name of every stored function pgqueue has shipped: one folder each under ``sql/functions/``."""
    return sorted(p.name for p in ((root or sql_dir()) / "functions").iterdir() if p.is_dir())


def function_versions(name: str, root: Path | None = None) -> list[str]:
    """Every version of one function, oldest first, as paths under ``sql/``: ``functions/<name>/<revision>.sql``.

    The revision is the four digits of the alembic revision that installs that version
    (``pgqueue_0007`` installs ``functions/reserve/0007.sql``); the last one is what head runs.
    """
    folder = (root or sql_dir()) / "functions" / name
    versions = sorted(p.name for p in folder.glob("[0-9][0-9][0-9][0-9].sql"))
    if not versions:
        raise FileNotFoundError(f"pgqueue: no stored function named {name!r} ({folder} holds no version)")
    return [f"functions/{name}/{version}" for version in versions]


def function_path(name: str) -> str:
    """The newest version of a stored function, the one head runs, as a path under ``sql/``.

    ``sql_file(function_path("reserve"))`` is the text a reader reviews and a database at head runs.
    """
    return function_versions(name)[-1]


@cache
def query(name: str) -> bytes:
    """A statement from ``sql/queries/<name>.sql``, ready for ``cursor.execute``.

    Returned as bytes: psycopg takes it as a query as it is, and it is never assembled
    from Python string fragments.
    """
    path = sql_dir() / "queries" / f"{name}.sql"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"pgqueue: no SQL statement named {name!r} ({path} is missing)") from None
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";").encode()
