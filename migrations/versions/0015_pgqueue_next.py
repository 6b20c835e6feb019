"""pgqueue: the revision after 0014 (open: what this wave changes in the database).

Revision ID: pgqueue_0015
Revises: pgqueue_0014
Create Date: 2026-12-04

sql/revisions/0015/upgrade.sql (tables: none so far) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0015"
down_revision: str | Sequence[str] | None = "pgqueue_0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0015.sql".
UPGRADE = (
    "revisions/0015/upgrade.sql",
    # issue 31: reserve's grant learns each candidate's place in the batch once (a join of the
    # batch's ordinality) instead of a linear search of the batch per row, six times
    "functions/reserve/0015.sql",
)

# The downgrade to pgqueue_0014: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/0015/downgrade.sql",
    # issue 31
    "functions/reserve/0014.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
