-- The registered schedules a worker's code declares: form, template registered, database clock, change time, last tick.
select * from pgqueue.schedule_state(%s::text[])
