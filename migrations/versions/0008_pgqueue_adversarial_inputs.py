"""pgqueue: the surfaces of revisions 0003-0007 hold under adversarial input.

Revision ID: pgqueue_0008
Revises: pgqueue_0007
Create Date: 2026-12-01

sql/revisions/0008/upgrade.sql and the functions below replace what let odd input loop,
lose a failure or act on a forged request.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0008"
down_revision: str | Sequence[str] | None = "pgqueue_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256).
UPGRADE = (
    "revisions/0008/upgrade.sql",
    "functions/shown/0008.sql",
    "functions/queue_name_problem/0008.sql",
    "functions/enqueue/0008.sql",
    "functions/enqueue_many/0008.sql",
    "functions/enqueue_unique/0008.sql",
    "functions/clear/0008.sql",
    "functions/resume/0008.sql",
    "functions/retry_failed_all/0008.sql",
    "functions/flush_failed/0008.sql",
    "functions/record_outcomes/0008.sql",
    "functions/release_interrupted/0008.sql",
    "functions/cancelled/0008.sql",
    "functions/schedule_state/0008.sql",
    "functions/schedule_sync/0008.sql",
    "functions/enqueue_tick/0008.sql",
    "functions/prune_ticks_and_keys/0008.sql",
)

# The downgrade to 0007: drop what 0008 added, then the frozen copies of what it replaced.
DOWNGRADE = (
    "revisions/0008/downgrade.sql",
    "functions/queue_name_problem/0002.sql",
    "functions/enqueue/0002.sql",
    "functions/enqueue_many/0002.sql",
    "functions/enqueue_unique/0003.sql",
    "functions/clear/0002.sql",
    "functions/resume/0004.sql",
    "functions/retry_failed_all/0002.sql",
    "functions/flush_failed/0002.sql",
    "functions/record_outcomes/0005.sql",
    "functions/schedule_sync/0003.sql",
    "functions/enqueue_tick/0003.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
