-- benchmarks/floors.py: empty the jobs table between measurements.
truncate pgqueue.jobs
