"""pgqueue: the revision after 0013 (open: what this wave changes in the database).

Revision ID: pgqueue_0014
Revises: pgqueue_0013
Create Date: 2026-12-03

sql/revisions/0014/upgrade.sql (tables) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0014"
down_revision: str | Sequence[str] | None = "pgqueue_0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0014.sql".
UPGRADE = (
    "revisions/0014/upgrade.sql",
    # issue 28, slot heirs: a job granted beyond a limit's free slots as the heir of one of its
    # caller's running jobs takes that job's slot when its reservation ends, with no write of its own
    "functions/hand_over/0014.sql",
    "functions/reserve/0014.sql",
)

# The downgrade to pgqueue_0013: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/0014/downgrade.sql",
    # issue 28, slot heirs
    "functions/hand_over/0013.sql",
    "functions/reserve/0013.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
