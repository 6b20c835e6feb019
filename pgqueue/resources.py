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
    """The folder holding pgqueue's SQL files (schema/, functions/, queries/)."""
    return _locate("_sql", "sql")


def migrations_dir() -> Path:
    """The alembic environment folder (env.py, versions/)."""
    return _locate("_migrations", "migrations")


def versions_dir() -> Path:
    """The alembic versions folder; add it to ``version_locations`` to upgrade with your own tree."""
    return migrations_dir() / "versions"


@cache
def sql_file(relative_path: str) -> str:
    """The text of one SQL file, e.g. ``sql_file("functions/reserve.sql")``."""
    return (sql_dir() / relative_path).read_text(encoding="utf-8")


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
