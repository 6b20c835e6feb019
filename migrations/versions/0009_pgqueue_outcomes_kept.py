"""pgqueue: outcomes are data (results, attempts, what waits for what).

Revision ID: pgqueue_0009
Revises: pgqueue_0008
Create Date: 2026-12-01

sql/revisions/0009/upgrade.sql (tables) and the functions below.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0009"
down_revision: str | Sequence[str] | None = "pgqueue_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Files under sql/, in the order they run (sql/migrations.lock holds their SHA-256): the table
# changes, then each new or changed function's new version, "functions/<name>/0009.sql".
UPGRADE = (
    # issue 26: results (the trigger function first: upgrade.sql creates its trigger)
    "functions/failure_recorded/0009.sql",
    # issue 28: debounce (the trigger function first: upgrade.sql creates its trigger)
    "functions/debounce_reserved/0009.sql",
    "revisions/0009/upgrade.sql",
    # issue 29: workers
    "functions/register_worker/0009.sql",
    "functions/refresh_worker/0009.sql",
    "functions/deregister_worker/0009.sql",
    # issue 29: the metrics' queue latency from the due time (reserve returns it)
    "functions/reserve/0009.sql",
    # issue 29: search and bulk actions
    "functions/jobs_matching/0009.sql",
    "functions/cancel_matching/0009.sql",
    "functions/delete_matching/0009.sql",
    "functions/retry_failed_matching/0009.sql",
    "functions/forget_failed_matching/0009.sql",
    # issue 26: results
    "functions/fail/0009.sql",
    "functions/release/0009.sql",
    "functions/ack_results/0009.sql",
    "functions/store_result/0009.sql",
    "functions/job_attempts/0009.sql",
    "functions/job_family/0009.sql",  # issue 26 §2, read by job_state
    "functions/job_state/0009.sql",
    "functions/prune_results/0009.sql",
    "functions/progress/0009.sql",
    # issue 28: debounce
    "functions/enqueue_debounced/0009.sql",
    # issue 28: partitions (the rule first: the functions after it call it)
    "functions/partition_problem/0009.sql",
    "functions/partition_limits_problem/0009.sql",
    "functions/envelope_problem/0009.sql",
    "functions/enqueue/0009.sql",
    "functions/enqueue_many/0009.sql",
    "functions/retry_failed/0009.sql",
    "functions/retry_failed_all/0009.sql",
    "functions/set_partition_limits/0009.sql",
    "functions/set_partition_limit/0009.sql",
    "functions/partition_status/0009.sql",
    "functions/partition_allowance/0009.sql",
    "functions/reserve_partitions/0009.sql",  # called by reserve 0009 (issue 29's, above)
    "functions/next_due/0009.sql",
    "functions/prune_partitions/0009.sql",
    # issue 26: dependencies and batches
    "functions/never/0009.sql",
    "functions/jobs_ended/0009.sql",
    "functions/add_dependencies/0009.sql",
    "functions/add_batch/0009.sql",
    "functions/parent_results/0009.sql",
    "functions/clear/0009.sql",
    "functions/batch_state/0009.sql",
    "functions/batch_results/0009.sql",
    # issue 28: adaptive limits (ack also calls jobs_ended, above)
    "functions/adaptive_acked/0009.sql",
    "functions/ack/0009.sql",
    "functions/backpressure/0009.sql",
    "functions/set_adaptive_limit/0009.sql",
)

# The downgrade to pgqueue_0008: undo the table changes and drop the functions this revision
# added, then the previous version of each function it replaced ("functions/<name>/<older>.sql").
DOWNGRADE = (
    "revisions/0009/downgrade.sql",
    # issue 29: reserve without the due time
    "functions/reserve/0007.sql",
    # issue 26: results
    "functions/fail/0005.sql",
    "functions/release/0005.sql",
    # issue 28: partitions
    "functions/envelope_problem/0002.sql",
    "functions/enqueue/0008.sql",
    "functions/enqueue_many/0008.sql",
    "functions/retry_failed/0002.sql",
    "functions/retry_failed_all/0008.sql",
    "functions/next_due/0004.sql",
    # issue 26: dependencies and batches; issue 28: adaptive limits (ack without either)
    "functions/ack/0005.sql",
    "functions/clear/0008.sql",
)


def upgrade() -> None:
    run_sql_files(UPGRADE)


def downgrade() -> None:
    run_sql_files(DOWNGRADE)
