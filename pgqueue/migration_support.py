"""Helpers the alembic revisions in ``migrations/versions`` call to run the files in ``sql/``."""

from __future__ import annotations

from collections.abc import Iterable

from alembic import context, op

from pgqueue.resources import sql_file


def run_sql_files(relative_paths: Iterable[str]) -> None:
    """Execute SQL files from ``sql/`` as they are (online), or print them (``--sql`` mode)."""
    for path in relative_paths:
        text = sql_file(path)
        if context.is_offline_mode():
            # Printed verbatim: no bind-parameter parsing of colons in PL/pgSQL bodies.
            context.get_context().impl.static_output(f"-- {path}\n{text}\n")
        else:
            _execute_verbatim(text)


def drop_schema() -> None:
    """Remove everything pgqueue installed (the ``pgqueue`` schema and its objects)."""
    statement = "drop schema if exists pgqueue cascade;"
    if context.is_offline_mode():
        context.get_context().impl.static_output(statement)
    else:
        _execute_verbatim(statement)


def _execute_verbatim(text: str) -> None:
    # Straight to the driver cursor without parameters, so that `%` in comments and
    # PL/pgSQL format() strings is not taken for a placeholder. Same connection, same
    # transaction as the rest of the migration.
    dbapi_connection = op.get_bind().connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(text)
    finally:
        cursor.close()
