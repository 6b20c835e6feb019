"""pgqueue: a queue's rate limit is a token bucket with a burst capacity.

Revision ID: pgqueue_0006
Revises: pgqueue_0005
Create Date: 2026-11-30

sql/revisions/0006/upgrade.sql adds pgqueue.queues.rate_burst (the bucket's capacity; null:
the rate per period) and drops the four-argument set_limits. reserve is replaced by a version
whose bucket holds up to the burst, so one reservation takes up to min(free slots, tokens)
jobs; set_limits takes the burst as a fifth argument.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0006"
down_revision: str | Sequence[str] | None = "pgqueue_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256).
UPGRADE = (
    "revisions/0006/upgrade.sql",
    "functions/reserve/0006.sql",
    "functions/set_limits/0006.sql",
)

# The downgrade to 0005: undo the schema change, then 0004's frozen set_limits (0005 kept it) and
# 0005's frozen reserve again.
DOWNGRADE = (
    "revisions/0006/downgrade.sql",
    "functions/set_limits/0004.sql",
    "functions/reserve/0005.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
