-- pgqueue's branch leaves the application's alembic table at %(old)s revisions, before `pgqueue migrate`
-- records the upgraded ones (alembic_user_versions_insert, same transaction).
delete from alembic_version where version_num = any(%(old)s)
