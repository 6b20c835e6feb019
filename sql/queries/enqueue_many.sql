-- Many jobs in one round trip: a JSON array of envelopes and optional per-job delays.
select pgqueue.enqueue_many(%s::jsonb, %s::double precision[])
