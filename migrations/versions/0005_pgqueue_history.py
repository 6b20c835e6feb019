"""pgqueue: history of what was processed: job_stats, completed_jobs.

Revision ID: pgqueue_0005
Revises: pgqueue_0004
Create Date: 2026-11-30

sql/revisions/0005/upgrade.sql adds pgqueue.job_stats (per-minute outcome counts, handler
durations and queue latencies per queue and job name), pgqueue.completed_jobs (acked jobs kept
for audit with keep_completed) and jobs.due_at (where the queue latency starts). New functions:
record_outcomes, prune_history. ack, release and fail get overloads that take the handler's run time (the old
calls keep working and count too); ack, release, fail, cancel and reserve write the history.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0005"
down_revision: str | Sequence[str] | None = "pgqueue_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256).
UPGRADE = (
    "revisions/0005/upgrade.sql",
    "functions/record_outcomes/0005.sql",
    "functions/ack/0005.sql",
    "functions/release/0005.sql",
    "functions/fail/0005.sql",
    "functions/cancel/0005.sql",
    "functions/prune_history/0005.sql",
    "functions/reserve/0005.sql",
)

# The downgrade to 0004: drop what 0005 added, then the frozen functions it replaced again
# (ack, release and fail of 0002; cancel and reserve of 0004).
DOWNGRADE = (
    "revisions/0005/downgrade.sql",
    "functions/ack/0002.sql",
    "functions/release/0002.sql",
    "functions/fail/0002.sql",
    "functions/cancel/0004.sql",
    "functions/reserve/0004.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
