-- issue 27: send a signal to a workflow: 'delivered' or 'woken'. Arguments: workflow id, name, payload (JSON text or null).
select pgqueue.signal(%s::uuid, %s::text, %s::jsonb)
