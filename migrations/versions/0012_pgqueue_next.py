"""pgqueue: the revision after 0011 (open: what this wave changes in the database).

Revision ID: pgqueue_0012
Revises: pgqueue_0011
Create Date: 2026-12-02

sql/revisions/0012/upgrade.sql (tables) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0012"
down_revision: str | Sequence[str] | None = "pgqueue_0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0012.sql".
UPGRADE = ("revisions/0012/upgrade.sql",)

# The downgrade to pgqueue_0011: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = ("revisions/0012/downgrade.sql",)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
