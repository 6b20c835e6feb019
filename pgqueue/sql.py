"""pgqueue's SQL statements by name, for tools outside the library: a benchmark, an operator's script.

``statement("reserve")`` is ``sql/queries/reserve.sql`` exactly as the store runs it (comments
removed, bytes ready for ``cursor.execute``), so a tool measures or reuses the statement the
library runs instead of a copy that drifts. The library itself runs them through
:mod:`pgqueue.store` only; a statement's parameters are those of its file (``%s`` in order, or
``%(name)s``), documented in the file's comment.
"""

from __future__ import annotations

from pgqueue.resources import query

__all__ = ["statement"]


def statement(name: str) -> bytes:
    """The statement ``sql/queries/<name>.sql`` as the store runs it; FileNotFoundError naming the
    missing file for an unknown name."""
    return query(name)
