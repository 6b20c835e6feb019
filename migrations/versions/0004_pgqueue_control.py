"""pgqueue: queue controls and cancellation (issue 14): pause, global limits, cancel.

Revision ID: pgqueue_0004
Revises: pgqueue_0003
Create Date: 2026-11-30

sql/revisions/0004/0004_schema.sql adds pgqueue.queues (paused, concurrency and rate limits per
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

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0004/0004_schema.sql":
        "cee2bfce4478541ec35e3977b5a2f40317817fec9a66bd54d48651ee99a1dbe0",
    "revisions/0004/functions/reserve.sql":
        "c52f0fb530833221d0ce2e880eea93e8ead4196af9b5ceec985b6e9fea08baf4",
    "revisions/0004/functions/next_due.sql":
        "bccbff2c73f8ead2fbbe550e7feabf296e0da585a10db5411194ae11537da87a",
    "revisions/0004/functions/cancel.sql":
        "2b66dedbe051bd85e44a12276ac598cbe27ffadaeafdae187dbc938227fef710",
    "revisions/0004/functions/pause.sql":
        "d9dcda8960fc8b3299c5584b37c520fe1a0484c3e8c569c0849a54a63fac1146",
    "revisions/0004/functions/resume.sql":
        "74d3508c3c5e430a0454031838b20d0795e133688a894c14b1c2995a739f89bb",
    "revisions/0004/functions/set_limits.sql":
        "644eac4047eecb92e8f2a21902d754d71f1444954e18c82d60474c7ada4aca87",
}

# The downgrade to 0003: undo the schema change, drop what 0004 added, then the frozen reserve and
# next_due of 0002 again (0003 did not replace them).
DOWNGRADE_FILES = {
    "revisions/0004/downgrade.sql":
        "43dfd5d466783a7d0b3da368732c7ae6cf7b5557185ed937ceb230c2e5d3be06",
    "revisions/0002/functions/reserve.sql":
        "79d55f27da2e6e04158210534d4af0b94273402157d611ca911a05b835fd0402",
    "revisions/0002/functions/next_due.sql":
        "b8169136d0b521bdae158a9748e6f8d46ca5a04611a28ad7e13fd00b349e1016",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
