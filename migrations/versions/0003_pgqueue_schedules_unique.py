"""pgqueue: unique jobs, periodic jobs and snooze (issue 13).

Revision ID: pgqueue_0003
Revises: pgqueue_0002
Create Date: 2026-11-30

sql/revisions/0003/0003_schema.sql adds to pgqueue.jobs the unique key columns (unique_key,
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

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0003/functions/unique_requeue.sql":
        "ee9f74615d5cd017368e7bf1216b5e318c71453c09e49efd8e59c0709c3d2792",
    "revisions/0003/0003_schema.sql":
        "ac20a0d8c6dd45839eb2883bcd64f612c7d5994622995f87672966a67cf38b21",
    "revisions/0003/functions/enqueue_unique.sql":
        "4a02eca589f4912704b84b8771626971a24a3e2c8fce86c9737d90c26d23b9bb",
    "revisions/0003/functions/snooze.sql":
        "fdb97554f04457bd1f1e9867d11ec670fc503c4a2fc9bccf70a5e32bf59d400b",
    "revisions/0003/functions/schedule_sync.sql":
        "a468bb76d40df4da9445cb5245fdfa90bc692ee54a4f3554684dbd695dcc0255",
    "revisions/0003/functions/enqueue_tick.sql":
        "8d1030ad48c89d0eab78783de00d6ff4baa45bb4372970ac79092644241713cc",
}

DOWNGRADE_FILES = {
    "revisions/0003/downgrade.sql":
        "2896e2e8c076255dddbe74ccc367659c86d86d663fb2c5c6b9711f9fe55feb36",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
