-- pgqueue revisions recorded in the application's own alembic table (`alembic_version`), i.e. pgqueue's
-- branch applied through the application's tree. %(revisions)s: every pgqueue revision id.
-- Raises undefined_table when the application has no alembic table; the caller treats that as none.
select version_num from alembic_version where version_num = any(%(revisions)s) order by version_num
