-- Backlog for the scaling benchmark: %(count)s jobs shaped like real envelopes (the
-- template is a real envelope from pgqueue's own Envelope.build; id and args vary),
-- available after %(delay)s seconds (0 = ready now). Inserted without NOTIFY.
-- Ids are time-ordered like the ones dispatch makes (UUID version 7: the insert's clock in
-- milliseconds, the version nibble 7, the variant nibble 8, random hex digits).
insert into pgqueue.jobs (id, queue, priority, envelope, max_tries, retry_until, available_at)
select g.id, %(queue)s, 0,
       %(template)s::jsonb || jsonb_build_object('id', g.id::text, 'args', jsonb_build_object('seq', g.i)),
       %(tries)s, null, now() + make_interval(secs => %(delay)s)
from (select (lpad(to_hex((extract(epoch from clock_timestamp()) * 1000)::bigint), 12, '0')
              || '7' || left(md5(random()::text), 3) || '8' || left(md5(random()::text), 15))::uuid as id, i
      from generate_series(%(first)s::bigint, %(first)s::bigint + %(count)s - 1) as i) as g
