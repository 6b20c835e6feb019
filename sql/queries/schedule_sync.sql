-- The schedules a worker's code declares: database clock, change time and last tick of each.
select * from pgqueue.schedule_sync(%s::text[], %s::text[], %s::text[], %s::integer[])
