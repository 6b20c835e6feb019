-- How many live jobs match the dashboard's search (the conditions of pgqueue.jobs_matching, written
-- out to be evaluated inline, as in dashboard_jobs_search.sql), counted up to
-- %(cap)s + 1 (more: "more than cap"): what a bulk action on "all matching" would act on, shown
-- on its confirmation page. With sparse matches it reads the table up to the cap's matches.
select count(*)::bigint, count(*) filter (where x.token is not null)::bigint
from (
    select j.token from pgqueue.jobs j
    where (%(queue)s::text is null or j.queue = %(queue)s::text)
      and (%(name)s::text is null
           or strpos(lower(coalesce(j.envelope->>'name', '')), lower(%(name)s::text)) > 0)
      and (%(args)s::jsonb is null or coalesce(j.envelope->'args', '{}'::jsonb) @> %(args)s::jsonb)
      and (%(state)s::text is null or %(state)s::text = case
               when j.token is not null and j.available_at > now() then 'reserved'
               when j.token is not null then 'expired'
               when j.available_at >= '9999-01-01 00:00:00+00'::timestamptz then 'blocked'  -- issue 26
               when j.available_at > now() then 'delayed'
               else 'ready' end)
      and (%(since)s::timestamptz is null or j.created_at >= %(since)s::timestamptz)
      and (%(until)s::timestamptz is null or j.created_at < %(until)s::timestamptz)
    limit %(cap)s + 1
) x
