-- Register schedules with their periods and job templates; the state of each (pgqueue.schedule_state's columns).
select * from pgqueue.schedule_sync(%s::text[], %s::text[], %s::text[], %s::integer[], %s::bigint[], %s::jsonb[])
