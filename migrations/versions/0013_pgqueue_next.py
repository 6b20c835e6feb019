"""pgqueue: the revision after 0012 (open: what this wave changes in the database).

Revision ID: pgqueue_0013
Revises: pgqueue_0012
Create Date: 2026-12-03

sql/revisions/0013/upgrade.sql (tables) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0013"
down_revision: str | Sequence[str] | None = "pgqueue_0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0013.sql".
UPGRADE = (
    "revisions/0013/upgrade.sql",
    # issue 28 (a): the partition walk locks a turn of one job by the id it read, counts a walk's
    # running jobs in one scan and reads what each turn gave in one pass
    "functions/reserve_partitions/0013.sql",
    # issue 28, slot handover: jobs granted beyond a limit's free slots wait for one handed over
    "functions/hand_over/0013.sql",
    "functions/reserve/0013.sql",
)

# The downgrade to pgqueue_0012: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/0013/downgrade.sql",
    # issue 28 (a)
    "functions/reserve_partitions/0011.sql",
    # issue 28, slot handover
    "functions/reserve/0011.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
