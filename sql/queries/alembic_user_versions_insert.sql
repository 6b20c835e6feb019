-- pgqueue's branch recorded in the application's alembic table at %(new)s revisions, after `pgqueue migrate`
-- upgraded it.
insert into alembic_version (version_num) select unnest(%(new)s::text[])
