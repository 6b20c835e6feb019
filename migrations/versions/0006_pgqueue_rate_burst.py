"""pgqueue: a queue's rate limit is a token bucket with a burst capacity (issue 14).

Revision ID: pgqueue_0006
Revises: pgqueue_0005
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
down_revision: str | Sequence[str] | None = "pgqueue_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0006/0006_schema.sql":
        "5bffe3e0333483e914a0f09f795f87c3570a54a39ebfd49fe9ff138f1baf519b",
    "revisions/0006/functions/reserve.sql":
        "e16bdaef7dd6628c88d2e4320daf42a37f6c06ae70de42143984b2e3ef4de452",
    "revisions/0006/functions/set_limits.sql":
        "7ba9b8012642ea8b64b37ada4996f7b7a2d20056430d1dd3293123bee8132adb",
}

# The downgrade to 0005: undo the schema change, then 0004's frozen set_limits (0005 kept it) and
# 0005's frozen reserve again.
DOWNGRADE_FILES = {
    "revisions/0006/downgrade.sql":
        "b0f822007c2704d261656c67006d3251e5b9555d4e0ddbb55f594ebc46ced89c",
    "revisions/0004/functions/set_limits.sql":
        "644eac4047eecb92e8f2a21902d754d71f1444954e18c82d60474c7ada4aca87",
    "revisions/0005/functions/reserve.sql":
        "42f954ab9f6bb758a0d4119eb8580f74a5baf136478ac42f720e2424bb22d8d1",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
