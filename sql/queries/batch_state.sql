-- issue 26: one batch's progress, by batch, callback or member id.
select id, callback_id, total, pending, succeeded, failed, cancelled, created_at, finished_at
from pgqueue.batch_state(%s::uuid)
