-- Issue 28: the metrics per partition: per queue its busiest partitions and the rest summed (partition
-- null). Before revision 0010 (no pgqueue.partition_depths) it answers no rows.
select d.queue, d.partition, d.running, d.waiting, d.concurrency, d.partitions
from pgqueue.partition_depths(%s::integer) d
