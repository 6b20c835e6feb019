"""pgqueue: hardening: pinned search_path, bounds, envelope checks, queue-name rule.

Revision ID: pgqueue_0002
Revises: pgqueue_0001
Create Date: 2026-11-30

Every stored function is replaced by its copy in sql/functions/<name>/0002.sql, which pins
``search_path = pg_catalog, pg_temp`` (no object a caller can create in a schema of its
path is ever called by them), bounds delays and lease seconds, and makes enqueue and
enqueue_many refuse a malformed envelope, a bad queue name and args nested deeper than 64
levels by name. New: queue_name_problem and envelope_problem (helpers), and heartbeat (the
worker's lease renewal of all its running handlers in one statement).
sql/revisions/0002/upgrade.sql puts the queue-name rule on pgqueue.jobs as a CHECK.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0002"
down_revision: str | Sequence[str] | None = "pgqueue_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256).
UPGRADE = (
    "revisions/0002/upgrade.sql",
    "functions/queue_name_problem/0002.sql",
    "functions/envelope_problem/0002.sql",
    "functions/enqueue/0002.sql",
    "functions/enqueue_many/0002.sql",
    "functions/reserve/0002.sql",
    "functions/ack/0002.sql",
    "functions/release/0002.sql",
    "functions/release_unstarted/0002.sql",
    "functions/extend/0002.sql",
    "functions/fail/0002.sql",
    "functions/record_failure/0002.sql",
    "functions/retry_failed/0002.sql",
    "functions/retry_failed_all/0002.sql",
    "functions/forget_failed/0002.sql",
    "functions/flush_failed/0002.sql",
    "functions/clear/0002.sql",
    "functions/next_due/0002.sql",
    "functions/heartbeat/0002.sql",
)

# The downgrade: undo the schema change and drop what 0002 added, then 0001's own function
# files again (the same frozen copies revision 0001 runs), restoring their bodies and settings.
DOWNGRADE = (
    "revisions/0002/downgrade.sql",
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


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
