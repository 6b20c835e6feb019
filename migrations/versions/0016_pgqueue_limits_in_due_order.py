"""pgqueue: per-partition limits without fair shares are served in due order, each partition within its limits.

Revision ID: pgqueue_0016
Revises: pgqueue_0015
Create Date: 2026-12-04

sql/revisions/0016/upgrade.sql (tables: none) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0016"
down_revision: str | Sequence[str] | None = "pgqueue_0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0016.sql".
UPGRADE = (
    "revisions/0016/upgrade.sql",
    # issue 28: a queue with per-partition limits and no fair shares reserves in due order, each
    # partition within its limits (one ordered read), the round robin walk only for what that leaves
    "functions/reserve_partitions/0016.sql",
)

# The downgrade to pgqueue_0015: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/0016/downgrade.sql",
    # issue 28
    "functions/reserve_partitions/0013.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
