-- The dashboard scale benchmark's workers (issue 29): %(workers)s registered workers, each holding
-- 10 of the backlog's reserved jobs, and one of them gone (no heartbeat for a minute).
with registered as (
    select w, gen_random_uuid() as id from generate_series(1, %(workers)s) as w
), done as (
    select pgqueue.register_worker(r.id, 'bench-' || r.w, 1000 + r.w, array['default', 'emails'], 10, 2, 'bench', 30),
           r.id, r.w
    from registered r
)
update pgqueue.workers w
set held = coalesce((select array_agg(j.id) from (
                         select j.id from pgqueue.jobs j where j.token is not null
                         order by j.id offset (d.w - 1) * 10 limit 10) j), '{}'),
    heartbeat_at = case when d.w = 1 then now() - interval '1 minute' else now() end
from done d
where w.id = d.id
