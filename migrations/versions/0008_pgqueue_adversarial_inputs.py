"""pgqueue: the surfaces of revisions 0003-0007 hold under adversarial input.

Revision ID: pgqueue_0008
Revises: pgqueue_0007
Create Date: 2026-12-01

sql/revisions/0008/0008_schema.sql and the functions below replace what let odd input loop,
lose a failure or act on a forged request.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0008"
down_revision: str | Sequence[str] | None = "pgqueue_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0008/0008_schema.sql":
        "33f43684001b7a629ba1b88c2cfc96fd02417208f9da2155e81480fda12ffbf3",
    # A cancel notification is checked with the database before a worker acts on it (item 8).
    "revisions/0008/functions/cancelled.sql":
        "b3a5090165bc5a53587d6c612f528338d6fee7dafee41e96ebf37d1a45f0e42a",
}

# The downgrade to 0007: drop what 0008 added, then the frozen copies of what it replaced.
DOWNGRADE_FILES = {
    "revisions/0008/downgrade.sql":
        "bbfa86ab94998a1922463a9752ca7a6bebef37818261147d40698849cd0ddb61",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
