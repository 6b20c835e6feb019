-- Whether the database has a schema named pgqueue at all (whatever is in it): `pgqueue migrate` installs
-- head directly only into a database with neither this schema nor a recorded pgqueue revision.
select to_regnamespace('pgqueue') is not null
