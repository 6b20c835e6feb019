"""Fault, load and bad-input tests: real worker processes, injected faults, one ledger."""
