from __future__ import annotations

import psycopg


def test_migrated_database_has_the_tables(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    rows = conn.execute(
        "select table_name from information_schema.tables where table_schema = 'pgqueue' order by 1"
    ).fetchall()
    assert [r[0] for r in rows] == ["attempt_failures", "batch_members", "batches", "completed_jobs",
                                    "dependent_jobs", "failed_jobs", "job_dependencies", "job_results", "job_stats",
                                    "jobs", "partitions", "queue_stats", "queues", "schedule_ticks", "schedules",
                                    "unique_keys",
                                    "workers", "workflow_signals", "workflow_steps", "workflows"]
