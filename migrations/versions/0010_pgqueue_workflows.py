"""pgqueue: durable workflows, and what the next features keep in the database.

Revision ID: pgqueue_0010
Revises: pgqueue_0009
Create Date: 2026-12-01

sql/revisions/0010/upgrade.sql (tables) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0010"
down_revision: str | Sequence[str] | None = "pgqueue_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0010.sql".
UPGRADE = (
    "revisions/0010/upgrade.sql",
    # issue 28: the cheaper partitioned reservation, priority aging
    "functions/partition_allowance/0010.sql",
    "functions/reserve_partitions/0010.sql",
    "functions/aged_priority/0010.sql",
    "functions/reserve/0010.sql",
    "functions/set_aging/0010.sql",
)

# The downgrade to pgqueue_0009: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/0010/downgrade.sql",
    # issue 28: the cheaper partitioned reservation, priority aging
    "functions/partition_allowance/0009.sql",
    "functions/reserve_partitions/0009.sql",
    "functions/reserve/0009.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
