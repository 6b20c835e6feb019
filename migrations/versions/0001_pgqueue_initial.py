"""pgqueue: schema, tables, stats view and stored functions.

Revision ID: pgqueue_0001
Revises:
Create Date: 2026-11-29

Runs the frozen copies in sql/revisions/0001/ of what this revision shipped, each checked
against the SHA-256 recorded below: a database at pgqueue_0001 holds the same objects
whenever it was migrated. A later change ships in a later revision with its own copies.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.migration_support import run_sql_files

revision: str = "pgqueue_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("pgqueue",)
depends_on: str | Sequence[str] | None = None

# Path under sql/ -> SHA-256 of the file as shipped, in the order they run.
FILES = {
    "revisions/0001/0001_schema.sql":
        "218a9c901c0fa90c006f3a0d89a6f562b3ed159a7f7502fc58725de54db8b1c3",
    "revisions/0001/functions/enqueue.sql":
        "10741439c8c996f1ff22aa602fe2758b832e129105dd28139a2d3aea8259f64a",
    "revisions/0001/functions/enqueue_many.sql":
        "6453c69d062978accf1de29218fefb3bc6830e4dd53b46f3349494ecc93d5842",
    "revisions/0001/functions/reserve.sql":
        "8d7cd56f0f32f0e99b1c781906da2f64f35a4b10d2073751f6f7ab179b5c2a62",
    "revisions/0001/functions/ack.sql":
        "ffd43182b15ef90dcea44817dbba962467962fbe0ad569769b00e75c897ff501",
    "revisions/0001/functions/release.sql":
        "c9ba56d543d36992386d954f721954236d32b59b76422d6c85ec6f21bad0e3b4",
    "revisions/0001/functions/release_unstarted.sql":
        "e9fd272817a89f0b1451a804d16fc26c16172d32182a6966287466167a34630b",
    "revisions/0001/functions/extend.sql":
        "9d0c45fb4c07776b52a35ba3da867aaaf78cc554a0086c5674d34cc80b606b8b",
    "revisions/0001/functions/fail.sql":
        "befa112d21408696b6605f7bd157ea5a139cf7c4cc2ea4031739e7e573944488",
    "revisions/0001/functions/record_failure.sql":
        "b9dc55bf805554d6970a3984e855935598e6081bef539f51ffabb70f044f6e18",
    "revisions/0001/functions/retry_failed.sql":
        "9f3926e36b3b48b0205f281f62f3dccd80980e38e69bc0e089b7a3bdc1a7c79d",
    "revisions/0001/functions/retry_failed_all.sql":
        "04fcdceb46547f0791062756b3374ce95cc230abc0ca2786b342e5ba56e22748",
    "revisions/0001/functions/forget_failed.sql":
        "ee3d73ce0e986b20061a6c88e5bf953c51e65bd5167e3f0fb2e3ecb285ab96c5",
    "revisions/0001/functions/flush_failed.sql":
        "785cbefc71edd45bf55b6f30c5c9dfe6dcc17746c066d5e24a559df8d5cd5818",
    "revisions/0001/functions/clear.sql":
        "0cc2a62cc0a4773c9787039ed4a1d73d6a99004e28e1b4292aa0b6e46330afdc",
    "revisions/0001/functions/next_due.sql":
        "ccab0ae88997dc109d3ebcf7514875d0d324684e054dd6c86327f2590cc535ec",
}

# The downgrade: drop the pgqueue schema and everything in it.
DOWNGRADE_FILES = {
    "revisions/0001/0001_downgrade.sql":
        "2aaf68227f8c920074e237ac48d2d7656184d35bfe725df9abc6d7834aedea30",
}


def upgrade() -> None:
    run_sql_files(FILES)


def downgrade() -> None:
    run_sql_files(DOWNGRADE_FILES)
