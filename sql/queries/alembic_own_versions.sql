-- pgqueue's own alembic table, used by `pgqueue migrate`: read, then dropped, when pgqueue's branch lives
-- in the application's table instead.
select version_num from pgqueue_alembic_version order by version_num
