"""Helpers the alembic revisions in ``migrations/versions`` call to run their frozen SQL files.

A revision never runs the readable definitions in ``sql/functions``: it runs its own frozen
copies under ``sql/revisions/<revision>/``, each named with the SHA-256 of its content in the
revision module. A database migrated to a revision therefore holds exactly what that
revision shipped, whenever it was migrated, and a frozen file edited after the fact is
refused instead of silently installing something else under the same revision id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from alembic import context, op

from pgqueue.resources import sql_file


class FrozenFileChangedError(RuntimeError):
    """A revision's frozen SQL file no longer has the checksum the revision recorded."""


def checksum(text: str) -> str:
    """The checksum a revision records for a frozen SQL file: SHA-256 of its UTF-8 bytes, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def frozen_text(path: str, expected: str) -> str:
    """The text of ``sql/<path>``, after checking it still has the checksum its revision recorded."""
    text = sql_file(path)
    found = checksum(text)
    if found != expected:
        raise FrozenFileChangedError(
            f"pgqueue migrations: sql/{path} was changed after its revision shipped (sha256 {found}, "
            f"the revision recorded {expected}); nothing was migrated. A shipped revision must install "
            "what it always installed: restore the file, and put the change in a new revision."
        )
    return text


def run_sql_files(files: Mapping[str, str]) -> None:
    """Execute frozen SQL files (``path under sql/ -> sha256``), in order, after checking each checksum.

    Online they run on the migration's connection and transaction; in ``--sql`` (offline)
    mode they are printed verbatim.
    """
    texts = [(path, frozen_text(path, expected)) for path, expected in files.items()]
    for path, text in texts:
        if context.is_offline_mode():
            # Printed verbatim: no bind-parameter parsing of colons in PL/pgSQL bodies.
            context.get_context().impl.static_output(f"-- {path}\n{text}\n")
        else:
            _execute_verbatim(text)


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
