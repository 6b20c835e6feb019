"""pgqueue: the revision after the workflows (open: what this wave changes in the database).

Revision ID: pgqueue_0011
Revises: pgqueue_0010
Create Date: 2026-12-02

sql/revisions/0011/upgrade.sql (tables) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0011"
down_revision: str | Sequence[str] | None = "pgqueue_0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0011.sql".
UPGRADE = (
    "revisions/0011/upgrade.sql",
    # issue 27 (WAL): a step's checkpoint without a speculative insertion or a name index
    "functions/workflow_checkpoint/0011.sql",
    # issue 28: the partition walk reads the next index entries in one scan before probing, and
    # tells reserve whether a candidate's lease expired unended
    "functions/reserve_partitions/0011.sql",
    "functions/reserve/0011.sql",
)

# The downgrade to pgqueue_0010: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/0011/downgrade.sql",
    # issue 27 (WAL)
    "functions/workflow_checkpoint/0010.sql",
    # issue 28
    "functions/reserve_partitions/0010.sql",
    "functions/reserve/0010.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
