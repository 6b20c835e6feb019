"""``python -m benchmarks``: run the suite and write RESULTS.md and the plots."""

from benchmarks.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
