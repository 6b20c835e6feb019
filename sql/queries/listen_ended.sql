-- issue 26: a client awaiting results hears when a job ends (channel pgqueue_ended, payload: the
-- job id): a kept result written, or a failure or cancellation recorded.
listen pgqueue_ended
