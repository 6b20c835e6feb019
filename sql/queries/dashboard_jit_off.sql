-- Before dashboard_queues.sql, in the same transaction: no JIT compilation for it. Its laterals
-- stop after cap + 1 rows, which the planner cannot know, so it prices the query above
-- jit_above_cost and compiles it: over a second of compiling for a few milliseconds of work.
set local jit = off
