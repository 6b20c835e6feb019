-- A worker learns that one of its running jobs was cancelled (pgqueue.cancel; payload = job id).
listen pgqueue_cancel
