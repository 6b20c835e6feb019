"""How a store method runs one named statement on a connection of its pool.

Every domain module of the store is a mixin of :class:`Pooled`: it gets the store's pool and
these helpers, which check out a connection, run ``sql/queries/<name>.sql`` and read the
result in one of the shapes below. Statements that must share a transaction, or run in
pipeline mode, open the connection themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from psycopg import AsyncConnection
from psycopg.rows import class_row, dict_row
from psycopg_pool import AsyncConnectionPool

from pgqueue.resources import query

_Row = TypeVar("_Row")

#: The parameters of a statement: positional (``%s``), named (``%(name)s``) or none.
Params = Sequence[Any] | Mapping[str, Any] | None


def first(row: Sequence[Any] | None) -> Any:
    """The first column of a row (None: no row)."""
    return None if row is None else row[0]


class Pooled:
    """The store's pool, and one statement run on one of its connections (autocommit)."""

    __slots__ = ()
    _pool: AsyncConnectionPool[Any]

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool this store runs its statements on."""
        return self._pool

    @staticmethod
    async def read_committed(conn: AsyncConnection[Any]) -> None:
        """A pool's ``configure``: the new connection's transactions are READ COMMITTED, whatever the
        database's or role's ``default_transaction_isolation`` (pgqueue's statements rely on it; so do
        the transaction blocks that run on the pool's connections). One round trip per connection."""
        await conn.execute(query("session_read_committed"), prepare=False)

    async def _run(self, name: str, params: Params = None) -> None:
        """Run the statement, reading nothing back."""
        async with self._pool.connection() as conn:
            await conn.execute(query(name), params)

    async def _value(self, name: str, params: Params = None) -> Any:
        """The first column of the statement's first row (None: no row)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query(name), params)
            return first(await cur.fetchone())

    async def _row(self, name: str, params: Params = None) -> tuple[Any, ...] | None:
        """The statement's first row as a tuple (None: no row)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query(name), params)
            row: tuple[Any, ...] | None = await cur.fetchone()
        return row

    async def _rows(self, name: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Every row of the statement, as tuples."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(query(name), params)
            rows: list[tuple[Any, ...]] = await cur.fetchall()
        return rows

    async def _objects(self, name: str, row: type[_Row], params: Params = None) -> list[_Row]:
        """Every row of the statement as a ``row`` (a dataclass whose fields are the columns' names)."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=class_row(row))
            await cur.execute(query(name), params)
            objects: list[_Row] = await cur.fetchall()
        return objects

    async def _dicts(self, name: str, params: Params = None) -> list[dict[str, Any]]:
        """Every row of the statement as a dict by column name."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query(name), params)
            rows: list[dict[str, Any]] = await cur.fetchall()
        return rows
