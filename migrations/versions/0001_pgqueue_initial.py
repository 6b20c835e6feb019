"""pgqueue: schema, tables, stats view and stored functions.

Revision ID: pgqueue_0001
Revises:
Create Date: 2026-11-29

Runs the frozen files of what this revision shipped (sql/revisions/0001/upgrade.sql and
sql/functions/<name>/0001.sql), each checked against its SHA-256 in sql/migrations.lock: a
database at pgqueue_0001 holds the same objects whenever it was migrated. A later change
ships in a later revision with its own files.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("pgqueue",)
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256).
UPGRADE = (
    "revisions/0001/upgrade.sql",
    "functions/enqueue/0001.sql",
    "functions/enqueue_many/0001.sql",
    "functions/reserve/0001.sql",
    "functions/ack/0001.sql",
    "functions/release/0001.sql",
    "functions/release_unstarted/0001.sql",
    "functions/extend/0001.sql",
    "functions/fail/0001.sql",
    "functions/record_failure/0001.sql",
    "functions/retry_failed/0001.sql",
    "functions/retry_failed_all/0001.sql",
    "functions/forget_failed/0001.sql",
    "functions/flush_failed/0001.sql",
    "functions/clear/0001.sql",
    "functions/next_due/0001.sql",
)

# The downgrade: drop the pgqueue schema and everything in it.
DOWNGRADE = (
    "revisions/0001/downgrade.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
