-- Per schedule name: the last enqueued tick (for schedule:list).
select s.name, s.expression, s.timezone, s.seen_at, max(t.tick) as last_tick
from pgqueue.schedules s left join pgqueue.schedule_ticks t on t.schedule = s.name
where s.name = any(%s::text[])
group by s.name, s.expression, s.timezone, s.seen_at
