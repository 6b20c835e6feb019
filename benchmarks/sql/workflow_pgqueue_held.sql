-- pgqueue workflows a worker holds (reserved: a token and a lease); a sleeping or waiting
-- workflow has ended its attempt and holds none.
select count(*) from pgqueue.jobs where token is not null
