-- Seconds until the earliest job of these queues becomes reservable (null: none).
select extract(epoch from pgqueue.next_due(%s::text[]) - clock_timestamp())::double precision
