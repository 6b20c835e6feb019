"""pgqueue: unique jobs, periodic jobs and snooze.

Revision ID: pgqueue_0003
Revises: pgqueue_0002
Create Date: 2026-11-30

sql/revisions/0003/upgrade.sql adds to pgqueue.jobs the unique key columns (unique_key,
unique_scope) with their two partial unique indexes and the snoozes counter; the tables
pgqueue.unique_keys (keys unique for a period), pgqueue.schedules and pgqueue.schedule_ticks.
New functions: enqueue_unique, snooze, schedule_sync, enqueue_tick and the trigger function
unique_requeue (run before the schema file, which creates its trigger).
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0003"
down_revision: str | Sequence[str] | None = "pgqueue_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256).
UPGRADE = (
    "functions/unique_requeue/0003.sql",
    "revisions/0003/upgrade.sql",
    "functions/enqueue_unique/0003.sql",
    "functions/snooze/0003.sql",
    "functions/schedule_sync/0003.sql",
    "functions/enqueue_tick/0003.sql",
)

DOWNGRADE = (
    "revisions/0003/downgrade.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
