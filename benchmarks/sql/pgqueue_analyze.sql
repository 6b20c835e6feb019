-- Fresh planner statistics after a bulk fill.
analyze pgqueue.jobs
