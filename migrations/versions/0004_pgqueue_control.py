"""pgqueue: queue controls and cancellation: pause, global limits, cancel.

Revision ID: pgqueue_0004
Revises: pgqueue_0003
Create Date: 2026-11-30

sql/revisions/0004/upgrade.sql adds pgqueue.queues (paused, concurrency and rate limits per
queue) and the failure reason 'cancelled'. New functions: cancel, pause, resume, set_limits;
reserve and next_due are replaced by versions that honour the queue controls.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0004"
down_revision: str | Sequence[str] | None = "pgqueue_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256).
UPGRADE = (
    "revisions/0004/upgrade.sql",
    "functions/reserve/0004.sql",
    "functions/next_due/0004.sql",
    "functions/cancel/0004.sql",
    "functions/pause/0004.sql",
    "functions/resume/0004.sql",
    "functions/set_limits/0004.sql",
)

# The downgrade to 0003: undo the schema change, drop what 0004 added, then the frozen reserve and
# next_due of 0002 again (0003 did not replace them).
DOWNGRADE = (
    "revisions/0004/downgrade.sql",
    "functions/reserve/0002.sql",
    "functions/next_due/0002.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
