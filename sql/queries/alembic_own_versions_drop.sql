-- pgqueue's own alembic table, dropped once its rows moved to the application's table.
drop table pgqueue_alembic_version
