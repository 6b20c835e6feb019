"""pgqueue: a queue's rate limit is a token bucket with a burst capacity (issue 14).

Revision ID: pgqueue_0006
Revises: pgqueue_0004
Create Date: 2026-11-30

sql/revisions/0006/0006_schema.sql adds pgqueue.queues.rate_burst (the bucket's capacity; null:
the rate per period) and drops the four-argument set_limits. reserve is replaced by a version
whose bucket holds up to the burst, so one reservation takes up to min(free slots, tokens)
jobs; set_limits takes the burst as a fifth argument.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0006"
down_revision: str | Sequence[str] | None = "pgqueue_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0006/0006_schema.sql":
        "5bffe3e0333483e914a0f09f795f87c3570a54a39ebfd49fe9ff138f1baf519b",
    "revisions/0006/functions/reserve.sql":
        "bba058056ee940ac2176e6da2bf7935ba187acdf2b4685745468cb1f46d527a4",
    "revisions/0006/functions/set_limits.sql":
        "7ba9b8012642ea8b64b37ada4996f7b7a2d20056430d1dd3293123bee8132adb",
}

# The downgrade to 0004: undo the schema change, then 0004's frozen set_limits and reserve again.
DOWNGRADE_FILES = {
    "revisions/0006/downgrade.sql":
        "09df06311b519b368abd1414c305e920a04e27a62ee54494f554b7bfb3aff28e",
    "revisions/0004/functions/set_limits.sql":
        "644eac4047eecb92e8f2a21902d754d71f1444954e18c82d60474c7ada4aca87",
    "revisions/0004/functions/reserve.sql":
        "c52f0fb530833221d0ce2e880eea93e8ead4196af9b5ceec985b6e9fea08baf4",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
