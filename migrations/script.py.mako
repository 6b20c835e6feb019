<% number = up_revision.removeprefix("pgqueue_") %>"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

What this revision changes, and why: sql/revisions/${number}/upgrade.sql (tables) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = ${repr(up_revision)}
down_revision: str | Sequence[str] | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/${number}.sql".
UPGRADE = (
    "revisions/${number}/upgrade.sql",
)

# The downgrade to ${down_revision}: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/${number}/downgrade.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
