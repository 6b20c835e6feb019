"""pgqueue: the surfaces of revisions 0003-0007 hold under adversarial input.

Revision ID: pgqueue_0008
Revises: pgqueue_0007
Create Date: 2026-12-01

sql/revisions/0008/0008_schema.sql and the functions below replace what let odd input loop,
lose a failure or act on a forged request.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0008"
down_revision: str | Sequence[str] | None = "pgqueue_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0008/0008_schema.sql":
        "5a59ecb3f26b626104597f0d7ae95729972ce939f980f7b6fe85b8579e304c6b",
    # Issue 24, item 4: an attempt the worker interrupts is given back, counted as given_back.
    "revisions/0008/functions/record_outcomes.sql":
        "8f2eea824405329e2c5d6f3cc806e41101a4131cea1c28f31946cf0f47fc5c03",
    "revisions/0008/functions/release_interrupted.sql":
        "9ba25f320eb4da9cc927c5607915997cfa3a36f8fdae80a2cf8f985629c86da0",
    # A cancel notification is checked with the database before a worker acts on it (item 8).
    "revisions/0008/functions/cancelled.sql":
        "b3a5090165bc5a53587d6c612f528338d6fee7dafee41e96ebf37d1a45f0e42a",
    # Periodic jobs: ticks the database decides from the registered schedule (issue 24, part C).
    "revisions/0008/functions/schedule_state.sql":
        "759eb21fdeec04542316a7d510d807b9142fe2229a89037d42c909bc3abb9645",
    "revisions/0008/functions/schedule_sync.sql":
        "2a7b217a6ba5fd2a9cb2b73879fd08a68a278368c9bb84627813e159eba15870",
    "revisions/0008/functions/enqueue_tick.sql":
        "423173d8904102b350d8f4ac0084a81364523e7b1e56fb755bd3c2d1228b2c9a",
    # Schedule ticks and expired unique keys are pruned by the workers' maintenance.
    "revisions/0008/functions/prune_ticks_and_keys.sql":
        "460040336cd770b97c2e31b0361830fa44abc50cbc49decc0d38a05baf28b623",
}

# The downgrade to 0007: drop what 0008 added, then the frozen copies of what it replaced.
DOWNGRADE_FILES = {
    "revisions/0008/downgrade.sql":
        "d7fec1ab4b69bdc53d25b798de476501b23fa1b88416d8729c3562315cbee434",
    # Issue 24, item 4.
    "revisions/0005/functions/record_outcomes.sql":
        "be54d76a471f5f43dbd7bb3d8bd1f79387bda5a23cd4eabbe0ba9e7746889558",
    # Periodic jobs: 0003's schedule_sync and enqueue_tick again.
    "revisions/0003/functions/schedule_sync.sql":
        "a468bb76d40df4da9445cb5245fdfa90bc692ee54a4f3554684dbd695dcc0255",
    "revisions/0003/functions/enqueue_tick.sql":
        "8d1030ad48c89d0eab78783de00d6ff4baa45bb4372970ac79092644241713cc",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
