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
        "50bef38c1da4bb5b9630eaef692f01414546f7cd3cb5c3ab7f23a8ef14203ebb",
    # Issue 24, item 4: an attempt the worker interrupts is given back, counted as given_back.
    "revisions/0008/functions/record_outcomes.sql":
        "8f2eea824405329e2c5d6f3cc806e41101a4131cea1c28f31946cf0f47fc5c03",
    "revisions/0008/functions/release_interrupted.sql":
        "9ba25f320eb4da9cc927c5607915997cfa3a36f8fdae80a2cf8f985629c86da0",
    # A cancel notification is checked with the database before a worker acts on it (item 8).
    "revisions/0008/functions/cancelled.sql":
        "b3a5090165bc5a53587d6c612f528338d6fee7dafee41e96ebf37d1a45f0e42a",
}

# The downgrade to 0007: drop what 0008 added, then the frozen copies of what it replaced.
DOWNGRADE_FILES = {
    "revisions/0008/downgrade.sql":
        "11cdf2aab26bc6698884aeb4a5e0849b037758a750201de519d40b90ad208646",
    # Issue 24, item 4.
    "revisions/0005/functions/record_outcomes.sql":
        "be54d76a471f5f43dbd7bb3d8bd1f79387bda5a23cd4eabbe0ba9e7746889558",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
