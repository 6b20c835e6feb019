-- Per schedule name given: the last enqueued tick (null: none yet) and the database clock.
select d.name, max(t.tick) as last_tick, clock_timestamp() as now
from unnest(%s::text[]) as d(name)
left join pgqueue.schedule_ticks t on t.schedule = d.name
group by d.name
order by d.name
